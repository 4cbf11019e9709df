"""A running `agentd web` (the dashboard) against a test's daemon: its process, its base URL and
the one-time token it printed, and an HTTP session that has exchanged that token for the cookie."""

from __future__ import annotations

import select
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlsplit

import httpx2

START_TIMEOUT_S = 30.0
STOP_TIMEOUT_S = 30.0


@dataclass
class WebServer:
    proc: subprocess.Popen[bytes]
    url: str  # as printed: http://127.0.0.1:PORT/?token=…
    lines: list[str] = field(default_factory=list)

    @property
    def base(self) -> str:
        parts = urlsplit(self.url)
        return f"{parts.scheme}://{parts.netloc}"

    @property
    def port(self) -> int:
        return int(urlsplit(self.url).port or 0)

    @property
    def token(self) -> str:
        return parse_qs(urlsplit(self.url).query)["token"][0]

    def stop(self) -> int:
        """SIGTERM, then the exit status (bounded)."""
        if self.proc.poll() is None:
            self.proc.terminate()
        try:
            return self.proc.wait(timeout=STOP_TIMEOUT_S)
        finally:
            for stream in (self.proc.stdout, self.proc.stderr):
                if stream is not None:
                    stream.close()


def start_web(socket: Path, *extra: str, timeout_s: float = START_TIMEOUT_S) -> WebServer:
    """`agentd web --no-open` on a free loopback port; waits (bounded) for the URL it prints."""
    command = [sys.executable, "-m", "agentd", "web", "--socket", str(socket), "--no-open"]
    command += ["--listen", "127.0.0.1:0", *extra]
    proc = subprocess.Popen(command, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    assert proc.stdout is not None
    deadline = time.monotonic() + timeout_s
    ready, _, _ = select.select([proc.stdout], [], [], timeout_s)
    line = proc.stdout.readline().decode().strip() if ready else ""
    if line.startswith("http://") and time.monotonic() < deadline:
        return WebServer(proc, line, [line])
    proc.kill()
    _, err = proc.communicate(timeout=STOP_TIMEOUT_S)
    raise AssertionError(f"agentd web did not print its URL: {line!r} {err.decode()[-2000:]}")


@contextmanager
def signed_in(server: WebServer) -> Iterator[httpx2.Client]:
    """An HTTP client holding the session cookie (it has used the one-time token)."""
    with httpx2.Client(base_url=server.base, timeout=START_TIMEOUT_S) as client:
        answer = client.get(f"/?token={server.token}")
        assert answer.status_code == 303, answer.text
        assert client.cookies.get(f"agentd_web_{server.port}"), answer.headers
        yield client


def csrf(client: httpx2.Client) -> dict[str, str]:
    """The header a state-changing request needs."""
    return {"x-csrf-token": str(client.get("/api/session").json()["csrf"])}


async def asgi_get(app: Any, path: str, headers: dict[str, str]) -> tuple[int, dict[str, str], bytes]:
    """One GET straight into an ASGI app, without a socket: its status, headers and body."""
    target, _, query = path.partition("?")
    scope = {
        "type": "http",
        "asgi": {"version": "3.0"},
        "http_version": "1.1",
        "method": "GET",
        "scheme": "http",
        "path": target,
        "raw_path": target.encode(),
        "query_string": query.encode(),
        "root_path": "",
        "headers": [(name.lower().encode(), value.encode()) for name, value in headers.items()],
        "client": ("127.0.0.1", 50000),
        "server": ("127.0.0.1", 8765),
    }
    sent: list[dict[str, Any]] = []

    async def receive() -> dict[str, Any]:
        return {"type": "http.request", "body": b"", "more_body": False}

    async def send(message: dict[str, Any]) -> None:
        sent.append(message)

    await app(scope, receive, send)
    start = sent[0]
    answer_headers = {name.decode(): value.decode() for name, value in start["headers"]}
    body = b"".join(message.get("body", b"") for message in sent[1:])
    return start["status"], answer_headers, body
