"""A running `agentd web` (the dashboard) against a test's daemon: its process, its base URL and
the one-time token it printed, and an HTTP session that has exchanged that token for the cookie."""

from __future__ import annotations

import select
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
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


def start_web(socket: Path, *extra: str) -> WebServer:
    """`agentd web --no-open` on a free loopback port; waits (bounded) for the URL it prints."""
    command = [sys.executable, "-m", "agentd", "web", "--socket", str(socket), "--no-open"]
    command += ["--listen", "127.0.0.1:0", *extra]
    proc = subprocess.Popen(command, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    assert proc.stdout is not None
    deadline = time.monotonic() + START_TIMEOUT_S
    ready, _, _ = select.select([proc.stdout], [], [], START_TIMEOUT_S)
    line = proc.stdout.readline().decode().strip() if ready else ""
    if line.startswith("http://") and time.monotonic() < deadline:
        return WebServer(proc, line, [line])
    proc.kill()
    _, err = proc.communicate(timeout=STOP_TIMEOUT_S)
    raise AssertionError(f"agentd web did not print its URL: {line!r} {err.decode()[-2000:]}")


def signed_in(server: WebServer) -> httpx2.Client:
    """An HTTP client holding the session cookie (it has used the one-time token)."""
    client = httpx2.Client(base_url=server.base, timeout=START_TIMEOUT_S)
    answer = client.get(f"/?token={server.token}")
    assert answer.status_code == 303, answer.text
    assert client.cookies.get(f"agentd_web_{server.port}"), answer.headers
    return client


def csrf(client: httpx2.Client) -> dict[str, str]:
    """The header a state-changing request needs."""
    return {"x-csrf-token": str(client.get("/api/session").json()["csrf"])}
