"""Where a client program's HTTP server listens: `agentd mcp serve --http` and `agentd web` both
take `HOST:PORT`, bind loopback unless told `--allow-remote`, and answer only to the loopback names
of the port they bound (a web page that reaches a loopback port through DNS rebinding names its own
host). Each program adds its own gate on top: a bearer token, or a session cookie. All of it is
pure but `bind`.
"""

from __future__ import annotations

import ipaddress
import socket
from dataclasses import dataclass

from agentd.errors import AgentdError

LOOPBACK_NAMES = ("127.0.0.1", "localhost", "[::1]")


class ListenError(AgentdError, ValueError):
    """A `HOST:PORT` that cannot be served; the message names the flag."""


@dataclass(frozen=True, slots=True)
class Listen:
    """Where the server listens: `host` as a socket takes it (no brackets), and the port."""

    host: str
    port: int

    @property
    def url_host(self) -> str:
        return f"[{self.host}]" if ":" in self.host else self.host

    def hosts(self, port: int) -> frozenset[str]:
        """The `Host` values a request to this server on `port` (the one bound) may carry."""
        names = {*LOOPBACK_NAMES, self.url_host}
        return frozenset(f"{name}:{port}" for name in names)


def parse_listen(value: str, *, flag: str, allow_remote: bool, remote_advice: str) -> Listen:
    """`HOST:PORT` (`[::1]:PORT` for IPv6) as given to `flag`.

    Raises:
        ListenError: not HOST:PORT, or not a loopback address without `--allow-remote` (the
            message then ends with `remote_advice`, what to put in front).
    """
    host, sep, port_text = value.rpartition(":")
    if not sep or not host or not port_text.isdigit() or int(port_text) > 65535:
        raise ListenError(f"{flag} {value!r}: expected HOST:PORT, e.g. 127.0.0.1:8765")
    if host.startswith("[") and host.endswith("]"):
        host = host[1:-1]
    if not allow_remote and not is_loopback(host):
        raise ListenError(
            f"{flag} {value!r}: {host} is not a loopback address; add --allow-remote to listen "
            f"beyond this machine ({remote_advice})"
        )
    return Listen(host, int(port_text))


def is_loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def bind(listen: Listen) -> socket.socket:
    """The listening socket (raises OSError: the address is taken or not ours)."""
    family = socket.AF_INET6 if ":" in listen.host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind((listen.host, listen.port))
        sock.listen(128)
    except OSError:
        sock.close()
        raise
    sock.set_inheritable(False)
    return sock
