"""Masking credentials written inline in URLs and argv (`agentd config show`)."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from agentd.config.redact import argv_credentials, redact_argv, redact_url, url_credentials


@pytest.mark.parametrize(
    ("url", "shown", "found"),
    [
        pytest.param("https://h/v1", "https://h/v1", [], id="plain"),
        pytest.param("https://u:p@h:8443/v1", "https://***@h:8443/v1", ["userinfo"], id="userinfo"),
        pytest.param("https://tok@h/", "https://***@h/", ["userinfo"], id="user-only"),
        pytest.param(
            "http://h/?api_key=k&x=1", "http://h/?api_key=***&x=***", ["query 'api_key'"], id="query"
        ),
        pytest.param("http://h/?region=eu", "http://h/?region=***", [], id="harmless-query-still-masked"),
    ],
)
def test_urls_lose_userinfo_and_query_values(url: str, shown: str, found: list[str]) -> None:
    assert redact_url(url) == shown
    assert url_credentials(url) == found


@pytest.mark.parametrize(
    ("argv", "shown", "found"),
    [
        pytest.param(["srv", "--root", "/x"], ["srv", "--root", "/x"], [], id="plain"),
        pytest.param(["srv", "--token", "t"], ["srv", "--token", "***"], ["--token"], id="flag-value"),
        pytest.param(["srv", "--api-key=t"], ["srv", "--api-key=***"], ["api-key"], id="flag-equals"),
        pytest.param(
            ["env", "DB_PASSWORD=x", "srv"], ["env", "DB_PASSWORD=***", "srv"], ["DB_PASSWORD"], id="env"
        ),
        pytest.param(["srv", "https://u:p@h/"], ["srv", "https://***@h/"], ["argument 1"], id="url-arg"),
        pytest.param(["srv", "--secret"], ["srv", "--secret"], [], id="trailing-flag-has-no-value"),
    ],
)
def test_argv_loses_credential_values(argv: list[str], shown: list[str], found: list[str]) -> None:
    assert redact_argv(argv) == shown
    assert argv_credentials(argv) == found


# Userinfo characters RFC 3986 allows unencoded (unreserved, sub-delims, ':' and percent escapes).
USERINFO = st.text(alphabet=st.sampled_from("abcXYZ019-._~!$&'()*+,;=:%"), min_size=1, max_size=40)


@given(USERINFO)
def test_a_password_in_userinfo_never_survives(password: str) -> None:
    url = f"https://user:{password}@host.example/v1"
    assert "user" not in redact_url(url).split("@")[0]
    assert redact_url(url).endswith("@host.example/v1")
