"""Who may reach `agentd mcp serve --http` (pure): where it listens, and whether one request is
let in — the bearer token, the `Origin` a browser sends and the `Host` it names.

A request that fails is refused before the MCP layer sees it: a foreign `Origin` or (on loopback)
a `Host` that is not this server's is how a web page reaches a local port through DNS rebinding,
and a missing or wrong token is anyone else. The token is compared in constant time.
"""

from __future__ import annotations

import hmac
from collections.abc import Mapping
from dataclasses import dataclass

from agentd.api import listen_address
from agentd.api.listen_address import Listen, ListenError

MIN_TOKEN_CHARS = 16


class AccessError(ValueError):
    """A flag's value that cannot be served; the message names the flag."""


def mcp_url(listen: Listen, port: int) -> str:
    return f"http://{listen.url_host}:{port}/mcp"


def parse_listen(value: str, *, allow_remote: bool) -> Listen:
    """`HOST:PORT` as given to `--http` (`listen_address.parse_listen`).

    Raises:
        AccessError: not HOST:PORT, or not a loopback address without `--allow-remote`.
    """
    try:
        return listen_address.parse_listen(
            value,
            flag="--http",
            allow_remote=allow_remote,
            remote_advice="and put TLS in front: docs/mcp-server.md",
        )
    except ListenError as exc:
        raise AccessError(str(exc)) from None


@dataclass(frozen=True, slots=True)
class Refusal:
    status: int
    message: str
    headers: tuple[tuple[str, str], ...] = ()


@dataclass(frozen=True, slots=True)
class Gate:
    """The rule one server applies to every request.

    `port` is the port actually bound (known only after binding when `--http` named port 0).
    With `remote`, any `Host` is accepted (the server is reached by names it cannot know), but an
    `Origin` still has to be this server's own.
    """

    token: str
    listen: Listen
    port: int
    remote: bool = False

    def origins(self) -> frozenset[str]:
        return frozenset(f"http://{host}" for host in self.hosts())

    def hosts(self) -> frozenset[str]:
        return self.listen.hosts(self.port)

    def refusal(self, headers: Mapping[str, str]) -> Refusal | None:
        """Why this request is refused, or None to let it in. `headers` keys are lower case."""
        origin = headers.get("origin")
        if origin is not None and origin.lower().rstrip("/") not in self.origins():
            return Refusal(403, f"Origin {origin!r} is not this server's; agentd mcp serve refuses it")
        host = headers.get("host", "")
        if not self.remote and host.lower() not in self.hosts():
            return Refusal(421, f"Host {host!r} is not this server's loopback address")
        scheme, _, presented = headers.get("authorization", "").partition(" ")
        if scheme.lower() != "bearer" or not presented:
            return Refusal(401, "a bearer token is required (the --token-file)", _CHALLENGE)
        if not hmac.compare_digest(presented.strip().encode(), self.token.encode()):
            return Refusal(401, "the bearer token is wrong", _CHALLENGE)
        return None


_CHALLENGE = (("www-authenticate", 'Bearer realm="agentd"'),)
