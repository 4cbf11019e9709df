"""Serving the metrics: the opt-in HTTP listener and the node-exporter textfile.

The listener is `prometheus_client`'s own WSGI app (content negotiation, OpenMetrics, gzip,
`name[]` filters) on the standard library's threading WSGI server, bound to TCP or to a unix
socket. It runs on threads of its own, so a slow scraper never touches the daemon's event loop;
each connection has a socket timeout and at most `MAX_CONNECTIONS` are served at once (more are
closed at accept). The textfile is written by `prometheus_client.write_to_textfile`, which writes
a temporary file beside it and renames it over the old one, so node-exporter never reads half.
"""

from __future__ import annotations

import contextlib
import os
import socket
import socketserver
import stat
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from wsgiref.simple_server import WSGIRequestHandler, make_server

from prometheus_client import CollectorRegistry, make_wsgi_app, write_to_textfile
from prometheus_client.exposition import ThreadingWSGIServer

from agentd.metrics.address import ListenAddress, TcpAddress, UnixAddress

MAX_CONNECTIONS = 16
CONNECTION_TIMEOUT_S = 10.0
SOCKET_MODE = 0o660  # the daemon's user and group may scrape; the figures hold no per-user data


class _Handler(WSGIRequestHandler):
    timeout = CONNECTION_TIMEOUT_S  # every read and write of the connection
    # The whole request (line and headers) must arrive within this, as an API frame must within
    # `[daemon] frame_deadline_s`: a client trickling a byte every few seconds would otherwise
    # hold one of the `MAX_CONNECTIONS` slots for ever, and sixteen of them starve the scraper.
    request_deadline_s = CONNECTION_TIMEOUT_S

    def setup(self) -> None:
        super().setup()
        if not isinstance(self.client_address, tuple):  # AF_UNIX peers have no address
            self.client_address = ("unix", 0)
        self._deadline = threading.Timer(self.request_deadline_s, self._cut)
        self._deadline.daemon = True
        self._deadline.start()

    def _cut(self) -> None:
        """The request did not arrive in time: end the connection (its read sees the end)."""
        with contextlib.suppress(OSError):
            self.connection.shutdown(socket.SHUT_RDWR)

    def parse_request(self) -> bool:
        parsed = super().parse_request()  # reads the headers: still under the deadline
        self._deadline.cancel()  # the request is in: answering it is bounded by `timeout`
        return parsed

    def finish(self) -> None:
        self._deadline.cancel()
        super().finish()

    def log_message(self, format: str, *args: Any) -> None:
        pass  # scrapes are not the daemon's events


class _Server(ThreadingWSGIServer):
    """A threading WSGI server that serves at most `MAX_CONNECTIONS` connections at once."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        self._slots = threading.BoundedSemaphore(MAX_CONNECTIONS)
        super().__init__(*args, **kwargs)

    def process_request(self, request: Any, client_address: Any) -> None:
        if not self._slots.acquire(blocking=False):
            self.shutdown_request(request)
            return
        try:
            super().process_request(request, client_address)
        except BaseException:
            self._slots.release()
            raise

    def process_request_thread(self, request: Any, client_address: Any) -> None:
        try:
            super().process_request_thread(request, client_address)
        finally:
            self._slots.release()


class _UnixServer(_Server):
    address_family = socket.AF_UNIX

    def server_bind(self) -> None:
        socketserver.TCPServer.server_bind(self)
        os.chmod(str(self.server_address), SOCKET_MODE)
        self.server_name = "localhost"
        self.server_port = 0
        self.setup_environ()


def _tcp_server_class(address: TcpAddress) -> type[_Server]:
    family = socket.getaddrinfo(address.host, address.port, type=socket.SOCK_STREAM)[0][0]

    class TcpServer(_Server):
        address_family = family

    return TcpServer


def _remove_stale_socket(path: str) -> None:
    """A socket left by an earlier daemon is replaced; any other file is an error, never removed."""
    try:
        mode = os.lstat(path).st_mode
    except FileNotFoundError:
        return
    if not stat.S_ISSOCK(mode):
        raise FileExistsError(f"{path} exists and is not a socket")
    os.unlink(path)


@contextlib.contextmanager
def serving(
    registry: CollectorRegistry, address: ListenAddress, *, request_deadline_s: float = CONNECTION_TIMEOUT_S
) -> Iterator[str]:
    """Serve `registry` at `address` until the block ends; yields where it listens. A client must
    send its whole request within `request_deadline_s`.

    Raises OSError when the address cannot be bound (in use, no such directory, …).
    """
    app = make_wsgi_app(registry)
    handler = type("Handler", (_Handler,), {"request_deadline_s": request_deadline_s})
    server: _Server
    if isinstance(address, UnixAddress):
        _remove_stale_socket(address.path)
        server = _UnixServer(address.path, handler)
        server.set_app(app)
        where = address.path
    else:
        server = make_server(address.host, address.port, app, _tcp_server_class(address), handler)
        host, port = str(server.server_address[0]), server.server_address[1]
        where = f"[{host}]:{port}" if ":" in host else f"{host}:{port}"
    thread = threading.Thread(target=server.serve_forever, name="agentd-metrics", daemon=True)
    thread.start()
    try:
        yield where
    finally:
        server.shutdown()  # returns within serve_forever's 0.5 s poll
        server.server_close()
        if isinstance(address, UnixAddress):
            with contextlib.suppress(OSError):
                os.unlink(address.path)


def write_textfile(registry: CollectorRegistry, path: Path) -> None:
    """Replace `path` with the current figures, atomically (blocking: run it on a worker thread)."""
    write_to_textfile(str(path), registry)
