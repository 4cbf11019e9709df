"""An SDK client connected to a real `agentd mcp serve` over stdio or streamable HTTP, and what it
was told."""

from __future__ import annotations

import select
import subprocess
import sys
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import anyio
import httpx2
import mcp_types as types
from mcp import Client, StdioServerParameters
from mcp.client.session import IncomingMessage
from mcp.client.streamable_http import streamable_http_client

CONNECT_TIMEOUT_S = 30.0


def serve_parameters(socket: Path) -> StdioServerParameters:
    return StdioServerParameters(
        command=sys.executable, args=["-m", "agentd", "mcp", "serve", "--socket", str(socket)]
    )


@dataclass
class Heard:
    """The notifications a client received, and an event set at each one."""

    updated: list[str] = field(default_factory=list)
    taken: int = 0  # the updates `next_update` has returned
    list_changed: int = 0
    progress: list[tuple[float, str | None]] = field(default_factory=list)
    changed: anyio.Event = field(default_factory=anyio.Event)

    async def handle(self, message: IncomingMessage) -> None:
        if isinstance(message, types.ResourceUpdatedNotification):
            self.updated.append(str(message.params.uri))
        elif isinstance(message, types.ResourceListChangedNotification):
            self.list_changed += 1
        else:
            return
        self.changed.set()
        self.changed = anyio.Event()

    async def next_update(self, timeout_s: float = 30.0) -> str:
        """The URI of the first `resources/updated` not taken yet, waiting (bounded) for one: an
        update that arrived before the call is not lost."""
        with anyio.fail_after(timeout_s):
            while len(self.updated) == self.taken:
                await self.changed.wait()
        self.taken += 1
        return self.updated[self.taken - 1]

    async def list_change_after(self, seen: int, timeout_s: float = 30.0) -> None:
        """Wait (bounded) until more than `seen` `resources/list_changed` were heard."""
        with anyio.fail_after(timeout_s):
            while self.list_changed == seen:
                await self.changed.wait()


@asynccontextmanager
async def open_client(
    socket: Path, *, mode: str = "legacy", **callbacks: Any
) -> AsyncIterator[tuple[Client, Heard]]:
    heard = Heard()
    client = Client(
        serve_parameters(socket),
        mode=mode,
        message_handler=heard.handle,
        read_timeout_seconds=CONNECT_TIMEOUT_S,
        **callbacks,
    )
    async with client:
        yield client, heard


@dataclass
class HttpServer:
    """A running `agentd mcp serve --http`: its process, URL and token."""

    proc: subprocess.Popen[bytes]
    url: str
    token: str
    lines: list[str]

    def headers(self, token: str | None = None) -> dict[str, str]:
        return {"Authorization": f"Bearer {self.token if token is None else token}"}

    def stop(self) -> int:
        """SIGTERM, then the exit status (bounded)."""
        self.proc.terminate()
        try:
            return self.proc.wait(timeout=CONNECT_TIMEOUT_S)
        finally:
            if self.proc.stderr is not None:
                self.proc.stderr.close()


def start_http_server(socket: Path, token_file: Path, *extra: str) -> HttpServer:
    """Start the server on a free loopback port; wait (bounded) until it says where it listens."""
    command = [sys.executable, "-m", "agentd", "mcp", "serve", "--socket", str(socket)]
    command += ["--http", "127.0.0.1:0", "--token-file", str(token_file), *extra]
    # Unbuffered: a buffered readline can take the next line into its buffer too, where `select`
    # does not see it, and the wait would then miss "listening on" written right after the token.
    proc = subprocess.Popen(command, stdin=subprocess.DEVNULL, stderr=subprocess.PIPE, bufsize=0)
    assert proc.stderr is not None
    lines: list[str] = []
    deadline = time.monotonic() + CONNECT_TIMEOUT_S
    while time.monotonic() < deadline:
        ready, _, _ = select.select([proc.stderr], [], [], max(0.0, deadline - time.monotonic()))
        line = proc.stderr.readline().decode() if ready else ""
        if not line:
            break
        lines.append(line.rstrip("\n"))
        if "listening on " in line:
            url = line.rsplit("listening on ", 1)[1].strip()
            return HttpServer(proc, url, token_file.read_text().strip(), lines)
    proc.kill()
    proc.wait(timeout=CONNECT_TIMEOUT_S)
    raise AssertionError(f"agentd mcp serve --http did not start: {lines}")


@asynccontextmanager
async def open_http_client(
    server: HttpServer, *, mode: str = "legacy", **callbacks: Any
) -> AsyncIterator[tuple[Client, Heard]]:
    heard = Heard()
    async with httpx2.AsyncClient(headers=server.headers(), timeout=CONNECT_TIMEOUT_S) as http:
        client = Client(
            streamable_http_client(server.url, http_client=http),
            mode=mode,
            message_handler=heard.handle,
            read_timeout_seconds=CONNECT_TIMEOUT_S,
            **callbacks,
        )
        async with client:
            yield client, heard
