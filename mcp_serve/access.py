"""Who may reach `agentd mcp serve --http` (pure): where it listens, and whether one request is
let in — the bearer token, the `Origin` a browser sends and the `Host` it names.

A request that fails is refused before the MCP layer sees it: a foreign `Origin` or (on loopback)
a `Host` that is not this server's is how a web page reaches a local port through DNS rebinding,
and a missing or wrong token is anyone else. The token is compared in constant time.
"""

from __future__ import annotations

import hmac
import ipaddress
from collections.abc import Mapping
from dataclasses import dataclass

LOOPBACK_NAMES = ("127.0.0.1", "localhost", "[::1]")
MIN_TOKEN_CHARS = 16


class AccessError(ValueError):
    """A flag's value that cannot be served; the message names the flag."""


@dataclass(frozen=True, slots=True)
class Listen:
    """Where the server listens: `host` as a socket takes it (no brackets), and the port."""

    host: str
    port: int

    @property
    def url_host(self) -> str:
        return f"[{self.host}]" if ":" in self.host else self.host

    def url(self, port: int | None = None) -> str:
        return f"http://{self.url_host}:{self.port if port is None else port}/mcp"


def parse_listen(value: str, *, allow_remote: bool) -> Listen:
    """`HOST:PORT` (`[::1]:PORT` for IPv6) as given to `--http`.

    Raises:
        AccessError: not HOST:PORT, or not a loopback address without `--allow-remote`.
    """
    host, sep, port_text = value.rpartition(":")
    if not sep or not host or not port_text.isdigit() or int(port_text) > 65535:
        raise AccessError(f"--http {value!r}: expected HOST:PORT, e.g. 127.0.0.1:8765")
    if host.startswith("[") and host.endswith("]"):
        host = host[1:-1]
    if not allow_remote and not is_loopback(host):
        raise AccessError(
            f"--http {value!r}: {host} is not a loopback address; add --allow-remote to listen "
            "beyond this machine (and put TLS in front: docs/mcp-server.md)"
        )
    return Listen(host, int(port_text))


def is_loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


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
        names = {*LOOPBACK_NAMES, self.listen.url_host}
        return frozenset(f"http://{name}:{self.port}" for name in names)

    def hosts(self) -> frozenset[str]:
        names = {*LOOPBACK_NAMES, self.listen.url_host}
        return frozenset(f"{name}:{self.port}" for name in names)

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
