"""An SDK client connected to a real `agentd mcp serve` over stdio, and what it was told."""

from __future__ import annotations

import sys
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from pathlib import Path

import anyio
import mcp_types as types
from mcp import Client, StdioServerParameters
from mcp.client.session import IncomingMessage

CONNECT_TIMEOUT_S = 30.0


def serve_parameters(socket: Path) -> StdioServerParameters:
    return StdioServerParameters(
        command=sys.executable, args=["-m", "agentd", "mcp", "serve", "--socket", str(socket)]
    )


@dataclass
class Heard:
    """The notifications a client received, and an event set at each one."""

    updated: list[str] = field(default_factory=list)
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
        """Wait (bounded) for the next `resources/updated`; its URI."""
        seen = len(self.updated)
        with anyio.fail_after(timeout_s):
            while len(self.updated) == seen:
                await self.changed.wait()
        return self.updated[seen]

    async def list_change_after(self, seen: int, timeout_s: float = 30.0) -> None:
        """Wait (bounded) until more than `seen` `resources/list_changed` were heard."""
        with anyio.fail_after(timeout_s):
            while self.list_changed == seen:
                await self.changed.wait()


@asynccontextmanager
async def open_client(socket: Path, *, mode: str = "legacy") -> AsyncIterator[tuple[Client, Heard]]:
    heard = Heard()
    client = Client(
        serve_parameters(socket),
        mode=mode,
        message_handler=heard.handle,
        read_timeout_seconds=CONNECT_TIMEOUT_S,
    )
    async with client:
        yield client, heard
