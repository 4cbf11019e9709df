"""Spawn payloads over the fixture MCP servers, and an event recorder tests can wait on.

`EventLog` is the sink the tests hand to `open_tools`: it keeps every event and wakes waiters,
so a test synchronises on "the router said it refreshed" instead of sleeping.
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from pathlib import Path

import anyio
from pydantic import JsonValue

from protocol.events import EventName
from protocol.spawn import SpawnPayload
from subagent.messages import ToolCall

FIXTURES = Path(__file__).resolve().parent.parent / "fixtures"
SENTINEL_ENV = "AGENTD_TEST_SENTINEL_DIR"
POISON_ENV = "AGENTD_TEST_POISON"
TRACEPARENT = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"

Fields = dict[str, JsonValue]


def stdio_server(name: str, script: str, *args: str, **spec: JsonValue) -> Fields:
    """An `McpServerSpec` (as data) running `tests/fixtures/<script>` with this interpreter."""
    return {
        "name": name,
        "transport": "stdio",
        "command": [sys.executable, str(FIXTURES / script), *args],
        **spec,
    }


def make_payload(*servers: Fields, **fields: JsonValue) -> SpawnPayload:
    """A minimal valid spawn payload granting `servers`."""
    data: Fields = {
        "task_id": "task-1",
        "run_id": "run-1",
        "instruction": "exercise the tools",
        "intelligence": [{"kind": "scripted", "script_path": "/dev/null"}],
        "mcp_servers": list(servers),
        "telemetry": {"traceparent": TRACEPARENT},
        **fields,
    }
    return SpawnPayload.model_validate(data)


def tool_call(name: str, /, *, call_id: str = "call-1", **arguments: JsonValue) -> ToolCall:
    return ToolCall(id=call_id, name=name, arguments=dict(arguments))


class EventLog:
    """An `EventSink` that records every event and lets a test wait, bounded, for a matching one."""

    def __init__(self) -> None:
        self.events: list[tuple[EventName, Fields]] = []
        self._arrived: anyio.Event | None = None

    def __call__(self, event: EventName, fields: Fields) -> None:
        self.events.append((event, fields))
        if self._arrived is not None:
            self._arrived.set()

    def named(self, event: EventName, **match: JsonValue) -> list[Fields]:
        return [f for e, f in self.events if e == event and all(f.get(k) == v for k, v in match.items())]

    async def wait_for(self, event: EventName, *, timeout_s: float = 10.0, **match: JsonValue) -> Fields:
        with anyio.fail_after(timeout_s):
            while not (found := self.named(event, **match)):
                self._arrived = anyio.Event()
                await self._arrived.wait()
        return found[-1]


async def wait_until(predicate: Callable[[], bool], *, timeout_s: float = 10.0) -> None:
    """Poll `predicate` (for effects outside this process, e.g. a server's sentinel file), bounded."""
    with anyio.fail_after(timeout_s):
        # Polling on purpose: the effect happens in another process, which cannot set our Event.
        while not predicate():  # noqa: ASYNC110
            await anyio.sleep(0.02)
