"""Who the dashboard lets in (pure): `--listen`, `Host` and `Origin`, the one-time token, the
session cookie and the CSRF token."""

from __future__ import annotations

import pytest

from agentd.api.listen_address import Listen
from dashboard.access import Admit, Exchange, Keys, Origins, Refusal, decide, parse_listen
from dashboard.errors import AccessError

PORT = 8765
LOCAL = Origins(Listen("127.0.0.1", PORT), PORT)
REMOTE = Origins(Listen("0.0.0.0", PORT), PORT, remote=True)
TOKEN = "launch-token-" + "x" * 30


def _keys_with_session() -> tuple[Keys, str]:
    keys = Keys(launch_token=TOKEN)
    session = keys.redeem(TOKEN)
    assert session is not None
    return keys, session


def _headers(session: str | None = None, **extra: str) -> dict[str, str]:
    headers = {"host": f"127.0.0.1:{PORT}", **{k.replace("_", "-"): v for k, v in extra.items()}}
    if session is not None:
        headers["cookie"] = f"other=1; agentd_web_{PORT}={session}"
    return headers


@pytest.mark.parametrize(
    ("value", "remote", "expected"),
    [
        pytest.param("127.0.0.1:8765", False, Listen("127.0.0.1", 8765), id="loopback"),
        pytest.param("[::1]:0", False, Listen("::1", 0), id="ipv6-loopback"),
        pytest.param("localhost:1", False, Listen("localhost", 1), id="localhost"),
        pytest.param("0.0.0.0:8765", True, Listen("0.0.0.0", 8765), id="remote-allowed"),
    ],
)
def test_listen_addresses_that_are_served(value: str, remote: bool, expected: Listen) -> None:
    assert parse_listen(value, allow_remote=remote) == expected


@pytest.mark.parametrize(
    ("value", "named"),
    [
        pytest.param("0.0.0.0:8765", "--allow-remote", id="remote-without-flag"),
        pytest.param("8765", "HOST:PORT", id="no-host"),
        pytest.param("127.0.0.1:99999", "HOST:PORT", id="port-out-of-range"),
        pytest.param("127.0.0.1:", "HOST:PORT", id="no-port"),
    ],
)
def test_listen_addresses_that_are_refused_name_the_flag(value: str, named: str) -> None:
    with pytest.raises(AccessError, match="--listen") as raised:
        parse_listen(value, allow_remote=False)
    assert named in str(raised.value)


def test_the_launch_token_is_exchanged_once_for_a_session_cookie() -> None:
    keys = Keys(launch_token=TOKEN)
    first = decide(keys, LOCAL, method="GET", path="/tasks/t1", query_token=TOKEN, headers=_headers())
    assert isinstance(first, Exchange) and first.location == "/tasks/t1"
    again = decide(keys, LOCAL, method="GET", path="/", query_token=TOKEN, headers=_headers())
    assert isinstance(again, Refusal) and again.status == 401
    # The browser that holds the session may open the printed URL again.
    reload = decide(keys, LOCAL, method="GET", path="/", query_token=TOKEN, headers=_headers(first.session))
    assert reload == Exchange(first.session, "/")


@pytest.mark.parametrize(
    ("method", "query_token", "session", "extra", "status"),
    [
        pytest.param("GET", None, None, {}, 401, id="no-cookie"),
        pytest.param("GET", "wrong" * 9, None, {}, 401, id="wrong-token"),
        pytest.param("GET", None, "forged", {}, 401, id="forged-cookie"),
        pytest.param("GET", None, "good", {"origin": "http://evil.example"}, 403, id="foreign-origin"),
        pytest.param("GET", None, "good", {"host": f"evil.example:{PORT}"}, 421, id="rebound-host"),
        pytest.param("GET", None, "good", {"host": "127.0.0.1:1"}, 421, id="other-port"),
        pytest.param("POST", None, "good", {}, 403, id="post-without-csrf"),
        pytest.param("POST", None, "good", {"x-csrf-token": "0" * 64}, 403, id="post-wrong-csrf"),
        pytest.param("POST", TOKEN, None, {}, 401, id="token-on-a-post"),
    ],
)
def test_requests_that_are_refused(
    method: str, query_token: str | None, session: str | None, extra: dict[str, str], status: int
) -> None:
    keys, good = _keys_with_session()
    cookie = good if session == "good" else session
    headers = {**_headers(cookie), **extra}
    verdict = decide(keys, LOCAL, method=method, path="/api/tasks", query_token=query_token, headers=headers)
    assert isinstance(verdict, Refusal) and verdict.status == status, verdict


@pytest.mark.parametrize(
    ("method", "extra"),
    [
        pytest.param("GET", {}, id="get"),
        pytest.param("GET", {"origin": f"http://localhost:{PORT}"}, id="get-same-origin"),
        pytest.param("POST", {"origin": f"http://127.0.0.1:{PORT}"}, id="post-with-csrf"),
    ],
)
def test_requests_that_are_let_in(method: str, extra: dict[str, str]) -> None:
    keys, session = _keys_with_session()
    headers = {**_headers(session), **extra}
    if method == "POST":
        headers["x-csrf-token"] = keys.csrf(session)
    verdict = decide(keys, LOCAL, method=method, path="/api/tasks", query_token=None, headers=headers)
    assert verdict == Admit(session)


def test_behind_a_proxy_any_host_is_served_but_the_origin_must_match_it() -> None:
    keys, session = _keys_with_session()
    headers = {"host": "agentd.example.org", "cookie": f"agentd_web_{PORT}={session}"}
    let_in = decide(keys, REMOTE, method="GET", path="/", query_token=None, headers=headers)
    assert let_in == Admit(session)
    crossed = {**headers, "origin": "https://evil.example"}
    refused = decide(keys, REMOTE, method="GET", path="/", query_token=None, headers=crossed)
    assert isinstance(refused, Refusal) and refused.status == 403
    same = {**headers, "origin": "https://agentd.example.org"}
    assert decide(keys, REMOTE, method="GET", path="/", query_token=None, headers=same) == Admit(session)


def test_a_csrf_token_belongs_to_its_session_only() -> None:
    keys, first = _keys_with_session()
    keys.sessions.add("second-session")
    assert keys.csrf_ok(first, keys.csrf(first))
    assert not keys.csrf_ok("second-session", keys.csrf(first))
    assert not keys.csrf_ok(first, None)


@pytest.mark.parametrize(
    ("path", "location"),
    [
        pytest.param("/tasks/t_1", "/tasks/t_1", id="a-page"),
        pytest.param("//evil.example/x", "/", id="protocol-relative"),
        pytest.param("/\\evil.example", "/%5Cevil.example", id="backslash"),
        pytest.param("/tasks/a b\r\nx", "/tasks/a%20b%0D%0Ax", id="spaces-and-newlines"),
    ],
)
def test_the_exchange_sends_the_browser_only_to_a_page_of_this_server(path: str, location: str) -> None:
    keys = Keys(launch_token=TOKEN)
    verdict = decide(keys, LOCAL, method="GET", path=path, query_token=TOKEN, headers=_headers())
    assert isinstance(verdict, Exchange) and verdict.location == location
