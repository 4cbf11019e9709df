"""The self-tools agentd serves itself: `resource_read`, `note_write`, `note_read`.

`resource_read` is deliberate attention over the catalogue's awareness (docs/loop.md, "Resources"): it reads
one resource from the server that listed it. The notes pair is lever 3 of §3.9: one private file
per task (0600, capped at 1 MiB), the only memory in core. The `subagent_*` tools live in
`delegate` and are routed through `SupervisorLink`; their names are reserved here.
"""

from __future__ import annotations

import os
import re
import tempfile
from collections.abc import Sequence
from pathlib import Path
from typing import Literal, Protocol

import anyio
import anyio.to_thread
import mcp_types
from pydantic import BaseModel, ConfigDict, Field, JsonValue, ValidationError

from protocol.spawn import SpawnPayload
from subagent.messages import JsonObject, ToolOutcome, ToolSpec
from subagent.tools.connection import Failure
from subagent.tools.render import render_resource, resource_images

RESOURCE_READ = "resource_read"
NOTE_WRITE = "note_write"
NOTE_READ = "note_read"
# Offered only to a loop schedule's runs (`SpawnPayload.idle_signal`).
NOTHING_TO_DO = "nothing_to_do"
# The supervisor-routed tools (`delegate`): reserved so no MCP tool can take their names.
SUPERVISOR_TOOLS = ("subagent_spawn", "subagent_wait", "subagent_status", "subagent_cancel")
RESERVED_NAMES = frozenset({RESOURCE_READ, NOTE_WRITE, NOTE_READ, NOTHING_TO_DO, *SUPERVISOR_TOOLS})
MAX_NOTES_BYTES = 1024 * 1024


class SupervisorLink(Protocol):
    """The control-channel request path to the supervisor (for the `subagent_*` self-tools)."""

    async def request(self, method: str, params: dict[str, JsonValue]) -> JsonValue: ...


class ResourceSource(Protocol):
    """A connected server as `resource_read` sees it."""

    @property
    def name(self) -> str: ...

    def lists(self, uri: str) -> bool: ...

    async def read(self, uri: str) -> mcp_types.ReadResourceResult | Failure: ...


class _Args(BaseModel):
    model_config = ConfigDict(extra="ignore", frozen=True)


class ResourceReadArgs(_Args):
    uri: str = Field(min_length=1, max_length=8192)
    server: str | None = Field(default=None, max_length=64)


class NoteWriteArgs(_Args):
    text: str = Field(max_length=MAX_NOTES_BYTES)
    mode: Literal["append", "replace"] = "append"


def _schema(properties: JsonObject, required: Sequence[str]) -> JsonObject:
    return {
        "type": "object",
        "properties": properties,
        "required": list(required),
        "additionalProperties": False,
    }


SPECS: tuple[ToolSpec, ...] = (
    ToolSpec(
        RESOURCE_READ,
        "Read the body of one resource listed in the resource catalogue, by its full URI. Text is "
        "returned as is; binary content is described (type and size), not returned.",
        _schema(
            {
                "uri": {"type": "string", "description": "The resource's full URI, as listed."},
                "server": {"type": "string", "description": "Optional: the server to read it from."},
            },
            ["uri"],
        ),
    ),
    ToolSpec(
        NOTE_WRITE,
        "Save notes that persist for the rest of this task, outside the conversation: decisions, "
        "facts and IDs worth keeping, the current plan. `append` (default) adds to them; `replace` "
        f"overwrites them. At most {MAX_NOTES_BYTES} bytes in total.",
        _schema(
            {
                "text": {"type": "string", "description": "The text to save."},
                "mode": {"type": "string", "enum": ["append", "replace"], "description": "append or replace"},
            },
            ["text"],
        ),
    ),
    ToolSpec(NOTE_READ, "Read back every note saved with note_write during this task.", _schema({}, [])),
)

# The structured "nothing done" signal of a loop run (docs/design.md §11): a tool call, not a phrase in
# the answer, so no text is ever matched.
IDLE_SPEC = ToolSpec(
    NOTHING_TO_DO,
    "Call this when you checked and found no work to do in this run (for example an empty queue). "
    "This task runs again later; reporting that nothing was done makes the next run wait longer. "
    "Then finish with a short final answer.",
    _schema({}, []),
)


def invalid_arguments(tool: str, exc: ValidationError) -> ToolOutcome:
    problems = "; ".join(
        f"{'.'.join(str(p) for p in e['loc']) or 'arguments'}: {e['msg']}"
        for e in exc.errors(include_url=False, include_input=False)
    )
    return ToolOutcome(f"invalid arguments for `{tool}`: {problems}", is_error=True)


async def read_resource(args: ResourceReadArgs, sources: Sequence[ResourceSource]) -> ToolOutcome:
    """Read `args.uri` from the named server, else the one that listed it, else any that will serve it."""
    if args.server is not None:
        candidates = [s for s in sources if s.name == args.server]
        if not candidates:
            return ToolOutcome(f"no connected server named `{args.server}` serves resources", is_error=True)
    else:
        candidates = [s for s in sources if s.lists(args.uri)] or list(sources)
    if not candidates:
        return ToolOutcome("no connected server serves resources", is_error=True)
    failures: list[str] = []
    for source in candidates:
        result = await source.read(args.uri)
        if not isinstance(result, Failure):
            return ToolOutcome(render_resource(result), images=resource_images(result))
        failures.append(f"{source.name}: {result.detail}")
    return ToolOutcome(f"resource `{args.uri}` could not be read ({'; '.join(failures)})", is_error=True)


def notes_path(payload: SpawnPayload) -> Path:
    """The task's notes file: `payload.notes_path`, else a private file under `$TMPDIR`."""
    if payload.notes_path is not None:
        return Path(payload.notes_path)
    stem = re.sub(r"[^A-Za-z0-9_.-]", "_", f"{payload.task_id}-{payload.run_id}")
    return Path(tempfile.gettempdir(), f"agentd-notes-{stem}.md")


class Notes:
    """One notes file per task: created 0600, never larger than `cap_bytes`."""

    def __init__(self, path: Path, *, cap_bytes: int = MAX_NOTES_BYTES) -> None:
        self.path = path
        self._cap = cap_bytes
        self._lock = anyio.Lock()

    # O_NOFOLLOW: the default path is predictable and may sit in a shared /tmp, so a planted
    # symlink must not redirect our writes (or reads) elsewhere.
    def _read_sync(self) -> str:
        try:
            fd = os.open(self.path, os.O_RDONLY | os.O_NOFOLLOW)
        except FileNotFoundError:
            return ""
        with os.fdopen(fd, "r", encoding="utf-8", errors="replace") as f:
            return f.read(self._cap + 1)

    def _write_sync(self, text: str) -> None:
        fd = os.open(self.path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW, 0o600)
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            f.write(text)

    async def write(self, args: NoteWriteArgs) -> ToolOutcome:
        async with self._lock:
            try:
                existing = await anyio.to_thread.run_sync(self._read_sync) if args.mode == "append" else ""
                joined = f"{existing}\n{args.text}" if existing and args.text else existing + args.text
                size = len(joined.encode())
                if size > self._cap:
                    return ToolOutcome(
                        f"notes not saved: they would be {size} bytes, over the {self._cap}-byte limit; "
                        "shorten them (note_write with mode `replace`) and try again",
                        is_error=True,
                    )
                await anyio.to_thread.run_sync(self._write_sync, joined)
            except OSError as exc:
                return ToolOutcome(f"notes not saved: {exc.strerror or exc}", is_error=True)
        return ToolOutcome(f"notes saved ({size} bytes in total)")

    async def read(self) -> ToolOutcome:
        async with self._lock:
            try:
                text = await anyio.to_thread.run_sync(self._read_sync)
            except OSError as exc:
                return ToolOutcome(f"notes could not be read: {exc.strerror or exc}", is_error=True)
        return ToolOutcome(text or "(no notes yet)")
