"""Who may reach `agentd mcp serve --http` (pure): the address, the token, Origin and Host."""

from __future__ import annotations

import pytest

from agentd.api.listen_address import Listen
from mcp_serve.access import AccessError, Gate, parse_listen

TOKEN = "t" * 43


@pytest.mark.parametrize(
    ("value", "listen"),
    [
        pytest.param("127.0.0.1:8765", Listen("127.0.0.1", 8765), id="ipv4"),
        pytest.param("localhost:0", Listen("localhost", 0), id="name-any-port"),
        pytest.param("[::1]:9000", Listen("::1", 9000), id="ipv6"),
    ],
)
def test_a_loopback_address_is_served(value: str, listen: Listen) -> None:
    assert parse_listen(value, allow_remote=False) == listen


@pytest.mark.parametrize("value", ["0.0.0.0:8765", "192.168.1.4:80", "example.org:443"])
def test_a_remote_address_needs_allow_remote(value: str) -> None:
    with pytest.raises(AccessError, match="--allow-remote"):
        parse_listen(value, allow_remote=False)
    assert parse_listen(value, allow_remote=True).port > 0


@pytest.mark.parametrize("value", ["8765", ":8765", "127.0.0.1:", "127.0.0.1:http", "127.0.0.1:70000"])
def test_a_malformed_address_names_the_flag(value: str) -> None:
    with pytest.raises(AccessError, match=r"--http .*HOST:PORT"):
        parse_listen(value, allow_remote=True)


def _gate(*, remote: bool = False) -> Gate:
    return Gate(token=TOKEN, listen=Listen("127.0.0.1", 0), port=4321, remote=remote)


GOOD = {"host": "127.0.0.1:4321", "authorization": f"Bearer {TOKEN}"}


@pytest.mark.parametrize(
    ("headers", "status"),
    [
        pytest.param(GOOD, None, id="token-no-origin"),
        pytest.param({**GOOD, "origin": "http://localhost:4321"}, None, id="loopback-origin"),
        pytest.param({**GOOD, "host": "[::1]:4321"}, None, id="ipv6-host"),
        pytest.param({"host": GOOD["host"]}, 401, id="no-token"),
        pytest.param({**GOOD, "authorization": "Basic abc"}, 401, id="not-bearer"),
        pytest.param({**GOOD, "authorization": "Bearer " + "u" * 43}, 401, id="wrong-token"),
        pytest.param({**GOOD, "origin": "http://evil.example"}, 403, id="foreign-origin"),
        pytest.param({**GOOD, "origin": "http://127.0.0.1:9999"}, 403, id="other-port-origin"),
        pytest.param({**GOOD, "host": "evil.example:4321"}, 421, id="rebound-host"),
    ],
)
def test_a_request_is_let_in_only_with_the_token_and_this_servers_origin_and_host(
    headers: dict[str, str], status: int | None
) -> None:
    refusal = _gate().refusal(headers)
    assert (refusal.status if refusal else None) == status


def test_behind_a_proxy_any_host_is_accepted_but_not_a_foreign_origin() -> None:
    assert _gate(remote=True).refusal({**GOOD, "host": "agentd.example.org"}) is None
    refused = _gate(remote=True).refusal({**GOOD, "origin": "https://evil.example"})
    assert refused is not None and refused.status == 403
