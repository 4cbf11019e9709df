"""Where the metrics listener binds: `HOST:PORT` or an absolute unix socket path (pure)."""

from __future__ import annotations

import ipaddress
import re
from dataclasses import dataclass

_HOST_PORT = re.compile(r"^(?:\[(?P<v6>[0-9A-Fa-f:.]+)\]|(?P<host>[A-Za-z0-9.-]+)):(?P<port>[0-9]{1,5})$")


@dataclass(frozen=True, slots=True)
class TcpAddress:
    host: str
    port: int


@dataclass(frozen=True, slots=True)
class UnixAddress:
    path: str


ListenAddress = TcpAddress | UnixAddress


def parse_listen(text: str) -> ListenAddress:
    """`127.0.0.1:9464`, `[::1]:9464`, `localhost:9464` or `/run/agentd/metrics.sock`.

    Raises ValueError with the reason for anything else (a relative path, a missing port, a port
    out of range, a host that is neither a name nor an address).
    """
    if text.startswith("/"):
        if "\0" in text:
            raise ValueError("a socket path cannot hold a NUL byte")
        return UnixAddress(text)
    match = _HOST_PORT.match(text)
    if match is None:
        raise ValueError(f"{text!r} is neither HOST:PORT (e.g. 127.0.0.1:9464) nor an absolute socket path")
    port = int(match["port"])
    if port > 65535:  # 0: any free port (the `proc.metrics` log line says which)
        raise ValueError(f"port {port} is out of range (0-65535)")
    if match["v6"] is not None:
        try:
            ipaddress.IPv6Address(match["v6"])
        except ValueError:
            raise ValueError(f"{match['v6']!r} is not an IPv6 address") from None
        return TcpAddress(match["v6"], port)
    return TcpAddress(match["host"], port)
