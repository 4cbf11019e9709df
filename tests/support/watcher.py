"""`WatcherHarness`: drive a real `python -m subagent.watch` process over its watch channel.

The supervisor's side of `protocol.watch`, for tests: it spawns the watcher in its own process
group, sends `ctrl/watch` (secrets revealed, as the daemon's encoder does), collects every
up-frame, and kills the group on exit. Every wait is bounded. Also the fixture servers' argv.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from collections.abc import AsyncIterator, Callable, Sequence
from contextlib import asynccontextmanager, suppress
from pathlib import Path

import anyio
import anyio.abc

from protocol import control, jsonrpc
from protocol.framing import FrameError, LineSplitter, decode, encode
from protocol.spawn import REVEAL_SECRETS, McpServerSpec
from protocol.watch import (
    WATCH_UP_ADAPTER,
    ResourceChanged,
    ResourceChangedParams,
    Watch,
    WatchPayload,
    WatchState,
    WatchStateParams,
    WatchTarget,
    WatchUp,
)

REPO = Path(__file__).resolve().parents[2]
FIXTURES = REPO / "tests" / "fixtures"


def fixture_argv(era: str, *args: str) -> list[str]:
    """The argv of the watch fixture server of `era` (`2025` or `2026`)."""
    return [sys.executable, str(FIXTURES / f"mcp_watch_{era}.py"), *args]


def watch_payload(
    command: Sequence[str], targets: Sequence[WatchTarget], *, name: str = "files", watcher_id: str = "w-1"
) -> WatchPayload:
    spec = McpServerSpec(name=name, transport="stdio", command=list(command), env={"PYTHONPATH": str(REPO)})
    return WatchPayload(watcher_id=watcher_id, server=spec, targets=list(targets))


class WatcherHarness:
    def __init__(self, process: anyio.abc.Process) -> None:
        self.process = process
        self.frames: list[WatchUp] = []
        self.bad_frames: list[FrameError] = []
        self.stderr = bytearray()
        self.stdout_done = False
        self._changed = anyio.Event()
        self._ping_seq = 0

    @property
    def pid(self) -> int:
        return self.process.pid

    async def read_stdout(self) -> None:
        assert self.process.stdout is not None
        splitter = LineSplitter()
        with suppress(anyio.EndOfStream, anyio.BrokenResourceError, anyio.ClosedResourceError):
            async for chunk in self.process.stdout:
                for line in splitter.feed(chunk):
                    message = decode(line, WATCH_UP_ADAPTER)
                    self._accept(message)
        for line in splitter.close():
            last = decode(line, WATCH_UP_ADAPTER)
            self._accept(last)
        self.stdout_done = True
        self._notify()

    def _accept(self, message: WatchUp | FrameError) -> None:
        if isinstance(message, FrameError):
            self.bad_frames.append(message)
        else:
            self.frames.append(message)
        self._notify()

    async def read_stderr(self) -> None:
        assert self.process.stderr is not None
        with suppress(anyio.EndOfStream, anyio.BrokenResourceError, anyio.ClosedResourceError):
            async for chunk in self.process.stderr:
                self.stderr += chunk[: max(0, 1_000_000 - len(self.stderr))]
                self._notify()

    def _notify(self) -> None:
        self._changed.set()
        self._changed = anyio.Event()

    # ---- waiting ---------------------------------------------------------------------------

    async def wait_for(self, predicate: Callable[[WatchUp], bool], *, timeout_s: float = 60.0) -> WatchUp:
        """The first frame (already received or future) matching `predicate`."""
        with anyio.fail_after(timeout_s):
            seen = 0
            while True:
                for frame in self.frames[seen:]:
                    if predicate(frame):
                        return frame
                seen = len(self.frames)
                if self.stdout_done:
                    raise AssertionError(
                        f"watcher closed its channel without a matching frame; frames: {self.frames[-10:]};"
                        f" stderr:\n{self.stderr.decode(errors='replace')[-3000:]}"
                    )
                await self._changed.wait()

    async def wait_stderr(self, text: bytes, *, timeout_s: float = 30.0) -> None:
        """Until the watcher's stderr (where its MCP server's stderr goes too) holds `text`."""
        with anyio.fail_after(timeout_s):
            while text not in self.stderr:
                await self._changed.wait()

    async def state(self, name: str, *, timeout_s: float = 60.0, nth: int = 1) -> WatchStateParams:
        """The `nth` `ev/watch_state` named `name` (1: the first), once it arrived."""
        await self.wait_for(lambda _f: len(self.states(name)) >= nth, timeout_s=timeout_s)
        return self.states(name)[nth - 1]

    async def resources_for(self, count: int, *, timeout_s: float = 60.0) -> list[ResourceChangedParams]:
        """Wait until at least `count` `ev/resource` frames arrived; all of them."""
        await self.wait_for(lambda _f: len(self.resources()) >= count, timeout_s=timeout_s)
        return self.resources()

    def resources(self) -> list[ResourceChangedParams]:
        return [f.params for f in self.frames if isinstance(f, ResourceChanged)]

    def states(self, name: str | None = None) -> list[WatchStateParams]:
        return [f.params for f in self.frames if isinstance(f, WatchState) and name in (None, f.params.state)]

    def events_named(self, name: str) -> list[control.EventParams]:
        return [f.params for f in self.frames if isinstance(f, control.Event) and f.params.event == name]

    # ---- writing ---------------------------------------------------------------------------

    async def send_raw(self, data: bytes) -> None:
        assert self.process.stdin is not None
        with anyio.fail_after(10), suppress(anyio.BrokenResourceError, anyio.ClosedResourceError, OSError):
            await self.process.stdin.send(data)

    async def ping(self, *, timeout_s: float = 5.0) -> control.PingResult:
        self._ping_seq += 1
        seq = self._ping_seq
        await self.send_raw(encode(control.Ping(id=seq, params=control.PingParams(seq=seq))))
        frame = await self.wait_for(
            lambda f: isinstance(f, jsonrpc.Response) and f.id == seq, timeout_s=timeout_s
        )
        assert isinstance(frame, jsonrpc.Response)
        return control.PingResult.model_validate(frame.result)

    async def cancel(self, reason: str = "test cancel") -> None:
        await self.send_raw(encode(control.Cancel(params=control.CancelParams(reason=reason))))

    async def close_stdin(self) -> None:
        assert self.process.stdin is not None
        await self.process.stdin.aclose()

    async def wait_exit(self, *, timeout_s: float = 60.0) -> int:
        with anyio.fail_after(timeout_s):
            return await self.process.wait()

    def kill(self, sig: int = signal.SIGKILL) -> None:
        with suppress(ProcessLookupError):
            os.killpg(self.process.pid, sig)


@asynccontextmanager
async def spawn_watcher(
    payload: WatchPayload | bytes | None,
    *,
    env: dict[str, str] | None = None,
    argv: Sequence[str] = (sys.executable, "-m", "subagent.watch"),
) -> AsyncIterator[WatcherHarness]:
    """Start `python -m subagent.watch`, send `payload` (a model, raw bytes, or nothing), yield a harness."""
    child_env = {**os.environ, "PYTHONPATH": str(REPO), "PYTHONUNBUFFERED": "1", **(env or {})}
    process = await anyio.open_process(
        list(argv),
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        env=child_env,
        start_new_session=True,
    )
    harness = WatcherHarness(process)
    try:
        async with anyio.create_task_group() as tg:
            tg.start_soon(harness.read_stdout)
            tg.start_soon(harness.read_stderr)
            if isinstance(payload, WatchPayload):
                await harness.send_raw(encode(Watch(params=payload), context=REVEAL_SECRETS))
            elif isinstance(payload, bytes):
                await harness.send_raw(payload)
            try:
                yield harness
            finally:
                harness.kill(signal.SIGKILL)
                with anyio.move_on_after(10), suppress(ProcessLookupError):
                    await process.wait()
                tg.cancel_scope.cancel()
    finally:
        with anyio.CancelScope(shield=True):
            await process.aclose()
