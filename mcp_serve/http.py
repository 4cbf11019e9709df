"""`agentd mcp serve --http HOST:PORT`: the same server over streamable HTTP, for clients on
other machines or in other sandboxes.

The SDK's streamable HTTP app (sessions with random ids, SSE for progress and notifications)
served by uvicorn (which comes with the `mcp` package) behind `Gate`: every request carries the
bearer token and, when a browser sends one, an `Origin` of this server's. The socket is bound
here, so `--http 127.0.0.1:0` learns its port before the first line it prints.
"""

from __future__ import annotations

import signal
import socket
import sys
from collections.abc import Awaitable, Callable, MutableMapping
from typing import Any

import uvicorn
from mcp.server import Server
from mcp.server.transport_security import TransportSecuritySettings

from agentd.api.listen_address import Listen
from mcp_serve.access import Gate, mcp_url

PATH = "/mcp"

Scope = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[MutableMapping[str, Any]]]
Send = Callable[[MutableMapping[str, Any]], Awaitable[None]]
ASGIApp = Callable[[Scope, Receive, Send], Awaitable[None]]


class GatedApp:
    """An ASGI app that lets in only what `gate` admits."""

    def __init__(self, app: ASGIApp, gate: Gate) -> None:
        self._app = app
        self._gate = gate

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http":
            headers = {
                name.decode("latin-1").lower(): value.decode("latin-1") for name, value in scope["headers"]
            }
            refusal = self._gate.refusal(headers)
            if refusal is not None:
                body = (refusal.message + "\n").encode()
                sent = [
                    (b"content-type", b"text/plain; charset=utf-8"),
                    (b"content-length", b"%d" % len(body)),
                ]
                sent += [(name.encode(), value.encode()) for name, value in refusal.headers]
                await send({"type": "http.response.start", "status": refusal.status, "headers": sent})
                await send({"type": "http.response.body", "body": body})
                return
        await self._app(scope, receive, send)


async def serve_http(
    server: Server[Any], listen: Listen, sock: socket.socket, token: str, *, remote: bool
) -> None:
    """Serve MCP on `sock` until SIGINT or SIGTERM."""
    port = sock.getsockname()[1]
    gate = Gate(token=token, listen=listen, port=port, remote=remote)
    # The gate checks Host and Origin itself, with the port actually bound.
    inner = server.streamable_http_app(
        streamable_http_path=PATH,
        host=listen.host,
        transport_security=TransportSecuritySettings(enable_dns_rebinding_protection=False),
    )
    config = uvicorn.Config(GatedApp(inner, gate), lifespan="on", log_level="warning", access_log=False)
    sys.stderr.write(f"agentd mcp serve: listening on {mcp_url(listen, port)}\n")
    sys.stderr.flush()
    # uvicorn shuts down gracefully on SIGTERM, then raises it again for the handler it found:
    # by then the work is done, so SIGTERM is a clean exit (status 0), as systemd expects.
    previous = signal.signal(signal.SIGTERM, _after_graceful_stop)
    try:
        await uvicorn.Server(config).serve(sockets=[sock])
    finally:
        signal.signal(signal.SIGTERM, previous)


def _after_graceful_stop(signum: int, frame: object) -> None:
    """SIGTERM once uvicorn has stopped serving: nothing is left to do."""
