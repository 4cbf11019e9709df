"""`ChildHarness`: drive a real `python -m subagent` process over its control channel.

A small stand-in for the supervisor's side of docs/design.md §3 used by e2e tests: it spawns the child,
sends the spawn frame, collects every up-frame, answers pings on request, and kills the process
group on exit. Every wait is bounded.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager, suppress
from pathlib import Path

import anyio
import anyio.abc
from pydantic import JsonValue

from protocol import control, jsonrpc
from protocol.framing import FrameError, LineSplitter, decode, encode
from protocol.result import RunResult
from protocol.spawn import REVEAL_SECRETS, SpawnPayload
from protocol.transcript import StepItem

REPO = Path(__file__).resolve().parents[2]

SupHandler = Callable[[control.SupSpawn | control.SupWait | control.SupStatus | control.SupCancel], JsonValue]


def unbatched(message: control.UpMessage) -> list[control.UpMessage]:
    """`message` as the frames its notes would have been alone: its events, its usage, then itself
    (a record) or nothing more (a batch)."""
    if not isinstance(message, control.Batch | control.SupRecord):
        return [message]
    notes: list[control.UpMessage] = [control.Event(params=e) for e in message.params.events]
    notes.extend(control.Usage(params=u) for u in message.params.usage)
    return [*notes, message] if isinstance(message, control.SupRecord) else notes


class ChildHarness:
    def __init__(self, process: anyio.abc.Process, sup_handler: SupHandler | None) -> None:
        self.process = process
        # Every frame as sent, and as the tests read them: a batch's notes (and a record's) one by one.
        self.wire_frames: list[control.UpMessage] = []
        self.frames: list[control.UpMessage] = []
        self.steps: list[StepItem] = []
        self.bad_frames: list[FrameError] = []
        self.stderr = bytearray()
        self._changed = anyio.Event()
        self._sup_handler = sup_handler
        self._ping_seq = 0

    @property
    def pid(self) -> int:
        return self.process.pid

    # ---- reading -----------------------------------------------------------------------------

    async def _read_stdout(self) -> None:
        assert self.process.stdout is not None
        splitter = LineSplitter()
        with suppress(anyio.EndOfStream, anyio.BrokenResourceError, anyio.ClosedResourceError):
            async for chunk in self.process.stdout:
                for line in splitter.feed(chunk):
                    message = decode(line, control.UP_ADAPTER)
                    self._accept(message)
                    if isinstance(message, control.SupRecord):
                        # The supervisor's journal, kept in memory: every step, answered at once.
                        self.steps.extend(message.params.items)
                        await self.send(jsonrpc.Response(id=message.id, result={"seq": len(self.steps)}))
                    elif isinstance(
                        message, control.SupSpawn | control.SupWait | control.SupStatus | control.SupCancel
                    ):
                        await self._answer(message)
        for line in splitter.close():
            last = decode(line, control.UP_ADAPTER)
            self._accept(last)
        self._notify()

    def _accept(self, message: control.UpMessage | FrameError) -> None:
        if isinstance(message, FrameError):
            self.bad_frames.append(message)
        else:
            self.wire_frames.append(message)
            self.frames.extend(unbatched(message))
        self._notify()

    async def _answer(
        self, request: control.SupSpawn | control.SupWait | control.SupStatus | control.SupCancel
    ) -> None:
        if self._sup_handler is None:
            error = jsonrpc.ErrorData(code=jsonrpc.METHOD_NOT_FOUND, message="no supervisor in this test")
            await self.send(jsonrpc.ErrorResponse(id=request.id, error=error))
        else:
            await self.send(jsonrpc.Response(id=request.id, result=self._sup_handler(request)))

    async def _read_stderr(self) -> None:
        assert self.process.stderr is not None
        with suppress(anyio.EndOfStream, anyio.BrokenResourceError, anyio.ClosedResourceError):
            async for chunk in self.process.stderr:
                self.stderr += chunk[: max(0, 1_000_000 - len(self.stderr))]

    def _notify(self) -> None:
        self._changed.set()
        self._changed = anyio.Event()

    async def wait_for(
        self, predicate: Callable[[control.UpMessage], bool], *, timeout_s: float = 15.0
    ) -> control.UpMessage:
        """The first frame (already received or future) matching `predicate`."""
        with anyio.fail_after(timeout_s):
            seen = 0
            while True:
                for frame in self.frames[seen:]:
                    if predicate(frame):
                        return frame
                seen = len(self.frames)
                if self.process.returncode is not None and self._stdout_done:
                    raise AssertionError(
                        f"child exited ({self.process.returncode}) without a matching frame;"
                        f" stderr:\n{self.stderr.decode(errors='replace')[-3000:]}"
                    )
                await self._changed.wait()

    async def events(self, name: str, *, timeout_s: float = 15.0) -> control.Event:
        frame = await self.wait_for(
            lambda f: isinstance(f, control.Event) and f.params.event == name, timeout_s=timeout_s
        )
        assert isinstance(frame, control.Event)
        return frame

    def events_named(self, name: str) -> list[control.EventParams]:
        return [f.params for f in self.frames if isinstance(f, control.Event) and f.params.event == name]

    async def result(self, *, timeout_s: float = 30.0) -> RunResult:
        frame = await self.wait_for(lambda f: isinstance(f, control.Result), timeout_s=timeout_s)
        assert isinstance(frame, control.Result)
        return frame.params

    def results(self) -> list[RunResult]:
        return [f.params for f in self.frames if isinstance(f, control.Result)]

    # ---- writing -----------------------------------------------------------------------------

    async def send(self, message: control.DownMessage, *, reveal: bool = False) -> None:
        await self.send_raw(encode(message, context=REVEAL_SECRETS if reveal else None))

    async def send_raw(self, data: bytes) -> None:
        assert self.process.stdin is not None
        with anyio.fail_after(10), suppress(anyio.BrokenResourceError, anyio.ClosedResourceError, OSError):
            await self.process.stdin.send(data)

    async def ping(self, *, timeout_s: float = 5.0) -> control.PingResult:
        self._ping_seq += 1
        seq = self._ping_seq
        await self.send(control.Ping(id=seq, params=control.PingParams(seq=seq)))
        frame = await self.wait_for(
            lambda f: isinstance(f, jsonrpc.Response) and f.id == seq, timeout_s=timeout_s
        )
        assert isinstance(frame, jsonrpc.Response)
        return control.PingResult.model_validate(frame.result)

    async def cancel(self, reason: str = "test cancel") -> None:
        await self.send(control.Cancel(params=control.CancelParams(reason=reason)))

    async def wait_exit(self, *, timeout_s: float = 15.0) -> int:
        with anyio.fail_after(timeout_s):
            return await self.process.wait()

    def kill(self, sig: int = signal.SIGKILL) -> None:
        with suppress(ProcessLookupError):
            os.killpg(self.process.pid, sig)

    _stdout_done: bool = False


@asynccontextmanager
async def spawn_child(
    payload: SpawnPayload | bytes | None,
    *,
    env: dict[str, str] | None = None,
    sup_handler: SupHandler | None = None,
    close_stdin: bool = False,
) -> AsyncIterator[ChildHarness]:
    """Start `python -m subagent`, send `payload` (a model, raw bytes, or nothing) and yield a harness."""
    child_env = {**os.environ, "PYTHONPATH": str(REPO), "PYTHONUNBUFFERED": "1", **(env or {})}
    process = await anyio.open_process(
        [sys.executable, "-m", "subagent"],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        env=child_env,
        start_new_session=True,
    )
    harness = ChildHarness(process, sup_handler)
    stdin_stream = process.stdin
    assert stdin_stream is not None
    try:
        async with anyio.create_task_group() as tg:

            async def read_out() -> None:
                await harness._read_stdout()
                harness._stdout_done = True
                harness._notify()

            tg.start_soon(read_out)
            tg.start_soon(harness._read_stderr)
            if isinstance(payload, SpawnPayload):
                await harness.send(control.Spawn(params=payload), reveal=True)
            elif isinstance(payload, bytes):
                await harness.send_raw(payload)
            if close_stdin:
                await stdin_stream.aclose()
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
