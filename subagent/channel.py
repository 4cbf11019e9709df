"""The child's end of the control channel: a reader thread, a locked writer, a wake pipe.

The control thread reads frames from the supervisor and answers `ctrl/ping` itself, so
liveness survives a model call that blocks for minutes and even a wedged event loop (its
`loop_age_ms` then grows). Each ping also posts a probe to the loop through the wake pipe; the
age a pong reports is how long the previous probe has waited for the loop (0 once the loop has
seen it). An idle child therefore wakes only when pinged: a loop that stamped a tick every
100 ms cost each parked child ≈ 4 ms of CPU a second, i.e. two cores for a thousand of them.
Everything else is handed to the event loop through an inbox and the same wake pipe, so the
thread never blocks on the loop: `ctrl/cancel` sets a flag first, then wakes the loop, which
cancels the operation in flight. A standing slot (`ctrl/lease`, `ctrl/unlease`) is handed to its
holder by the thread itself, so a request finds it without a turn of the loop; one that comes
before the holder is set keeps until it is.
"""

from __future__ import annotations

import contextlib
import itertools
import os
import queue
import threading
import time
from collections.abc import Callable
from typing import Any

import anyio
from pydantic import BaseModel, JsonValue

from protocol import control, jsonrpc
from protocol.events import EventName
from protocol.framing import MAX_FRAME, FrameError, LineSplitter, Oversize, decode, encode
from subagent.errors import AgentError
from subagent.notes import NoteBuffer

READ_CHUNK = 1 << 16
MAX_FAULTS_LOGGED = 5


class ChannelClosed(AgentError, ConnectionError):
    """The supervisor's end is gone; nothing more can be reported."""


class ControlChannel:
    """One child's control channel. `send` may be called from any thread."""

    def __init__(
        self,
        fd_in: int,
        fd_out: int,
        *,
        splitter: LineSplitter | None = None,
        early_lines: list[bytes | Oversize] | None = None,
    ) -> None:
        self._fd_in = fd_in
        self._fd_out = fd_out
        self._splitter = splitter or LineSplitter(MAX_FRAME)
        self._early = list(early_lines or [])
        self._write_lock = threading.Lock()
        self._closed = False
        # Events and usage reports not sent yet. Invariant: touched only under `_write_lock`, and
        # whenever it went from empty to not, a wake byte followed (so `serve` sends it soon).
        self._notes = NoteBuffer()
        # Set by the control thread; read by the loop at its check points (docs/loop.md, "Stop checks").
        self.cancel_requested = threading.Event()
        # Also told every event, on the emitting task (the traces: subagent/tracing.py).
        self.observer: Callable[[EventName, dict[str, JsonValue]], None] | None = None
        self.cancel_reason = ""
        # Monotonic time the control thread posted a probe the loop has not seen yet (None: seen).
        self._probe_at: float | None = None
        self.faults = 0
        self._inbox: queue.SimpleQueue[
            control.Inject | control.Go | jsonrpc.Response | jsonrpc.ErrorResponse | None
        ] = queue.SimpleQueue()
        self._wake_r, self._wake_w = os.pipe2(os.O_NONBLOCK | os.O_CLOEXEC)
        self._ids = itertools.count(1)
        self._waiting: dict[int, tuple[anyio.Event, list[Any]]] = {}
        self._thread: threading.Thread | None = None
        # Who holds standing slots (`set_lease_handler`), and the frames read before it was set.
        self._lease_lock = threading.Lock()
        self._lease_handler: Callable[[control.Lease | control.Unlease], None] | None = None
        self._early_leases: list[control.Lease | control.Unlease] = []

    # ---- writing (any thread) --------------------------------------------------------------

    @property
    def out_fd(self) -> int:
        """The channel's write end (the chaos tests' `flood-channel` fault writes to it raw)."""
        return self._fd_out

    def send(self, message: BaseModel) -> bool:
        """Write one frame, after the notes not sent yet (a `sup/record` carries them); False once
        the supervisor's end is closed."""
        with self._write_lock:
            if self._closed:
                return False
            return self._write_locked(self._with_notes(message))

    def emit(self, event: EventName, fields: dict[str, JsonValue]) -> None:
        """`EventSink`: report an event to the supervisor (and to the observer) with the next frame."""
        if self.observer is not None:
            self.observer(event, fields)
        self._note(control.EventParams(event=event, fields=fields))

    def report_usage(self, usage: control.UsageParams) -> None:
        """Report one model call's usage to the supervisor with the next frame."""
        self._note(usage)

    def flush_notes(self) -> None:
        """Send the notes not sent yet, alone (`ev/batch`)."""
        if self._notes.empty:
            # Nothing to send: never wait for the lock, which a writer blocked on a full pipe (a
            # supervisor that stopped reading) may hold; a note added meanwhile wakes the loop.
            return
        with self._write_lock:
            notes = self._notes.take()
            if notes is not None and not self._closed:
                self._write_locked(encode(control.Batch(params=notes)))

    def _note(self, note: control.EventParams | control.UsageParams) -> None:
        with self._write_lock:
            if self._closed:
                return
            first = self._notes.empty
            if self._notes.add(note):
                notes = self._notes.take()
                assert notes is not None
                self._write_locked(encode(control.Batch(params=notes)))
                return
        if first:
            self._wake()  # the loop's `serve` sends them at the end of its turn, unless a frame took them

    def _with_notes(self, message: BaseModel) -> bytes:
        notes = self._notes.take()
        if notes is None:
            return encode(message)
        if isinstance(message, control.SupRecord):
            params = message.params.model_copy(update={"events": notes.events, "usage": notes.usage})
            return encode(message.model_copy(update={"params": params}))
        return encode(control.Batch(params=notes)) + encode(message)

    def _write_locked(self, data: bytes) -> bool:
        view = memoryview(data)
        try:
            while view:
                written = os.write(self._fd_out, view)
                view = view[written:]
        except OSError:
            self._closed = True
            return False
        return True

    # ---- the control thread ----------------------------------------------------------------

    def start(self) -> None:
        self._thread = threading.Thread(target=self._read_forever, name="agentd-control", daemon=True)
        self._thread.start()

    def _read_forever(self) -> None:
        for line in self._early:
            self._handle(line)
        self._early.clear()
        while True:
            try:
                chunk = os.read(self._fd_in, READ_CHUNK)
            except OSError:
                chunk = b""
            lines = self._splitter.feed(chunk) if chunk else self._splitter.close()
            for line in lines:
                self._handle(line)
            if not chunk:
                # The supervisor closed our input or died: nobody can receive a result any more.
                self._request_cancel("control channel closed")
                return

    def _handle(self, line: bytes | Oversize) -> None:
        message = decode(line, control.DOWN_ADAPTER)
        if isinstance(message, FrameError):
            self._fault(message)
        elif isinstance(message, control.Ping):
            now = time.monotonic()
            probe_at = self._probe_at
            age_ms = 0 if probe_at is None else max(0, int((now - probe_at) * 1000))
            if probe_at is None:
                self._probe_at = now
                self._wake()
            result = control.PingResult(seq=message.params.seq, loop_age_ms=age_ms).model_dump()
            self.send(jsonrpc.Response(id=message.id, result=result))
        elif isinstance(message, control.Cancel):
            self._request_cancel(message.params.reason)
        elif isinstance(message, control.Lease | control.Unlease):
            self._on_lease(message)
        elif isinstance(message, control.Spawn):
            self._fault(FrameError("shape", "ctrl/spawn after the first frame", 0))
        else:
            self._inbox.put(message)
            self._wake()

    def set_lease_handler(self, handler: Callable[[control.Lease | control.Unlease], None]) -> None:
        """Hand standing slots to `handler` (called on the control thread), those read so far first."""
        with self._lease_lock:
            self._lease_handler = handler
            for message in self._early_leases:
                handler(message)
            self._early_leases.clear()

    def _on_lease(self, message: control.Lease | control.Unlease) -> None:
        # Under the lock: a call-back never overtakes the hand-out it calls back.
        with self._lease_lock:
            if self._lease_handler is None:
                self._early_leases.append(message)
            else:
                self._lease_handler(message)

    def _fault(self, error: FrameError) -> None:
        self.faults += 1
        if self.faults <= MAX_FAULTS_LOGGED:
            os.write(2, f"subagent: bad control frame ({error.kind}: {error.detail})\n".encode())

    def _request_cancel(self, reason: str) -> None:
        if not self.cancel_requested.is_set():
            self.cancel_reason = reason
            self.cancel_requested.set()
        self._wake()

    def _wake(self) -> None:
        with contextlib.suppress(BlockingIOError, OSError):
            os.write(self._wake_w, b"!")

    # ---- the event loop's side -------------------------------------------------------------

    async def serve(
        self,
        on_cancel: Callable[[], None],
        on_inject: Callable[[control.InjectParams], None],
        on_go: Callable[[control.GoParams], None] | None = None,
    ) -> None:
        """Run in the event loop: dispatch cancels, injections, `ctrl/go` and responses from the thread."""
        while True:
            await anyio.wait_readable(self._wake_r)
            with contextlib.suppress(BlockingIOError):
                while os.read(self._wake_r, 4096):
                    pass
            # After the drain: a probe whose wake byte was just read is cleared; one posted after
            # the drain left its byte in the pipe and wakes the loop again.
            self._probe_at = None
            self.flush_notes()
            if self.cancel_requested.is_set():
                on_cancel()
            while True:
                try:
                    item = self._inbox.get_nowait()
                except queue.Empty:
                    break
                if isinstance(item, control.Inject):
                    on_inject(item.params)
                elif isinstance(item, control.Go):
                    if on_go is not None:  # only a held run waits for one; any other ignores it
                        on_go(item.params)
                elif isinstance(item, jsonrpc.Response | jsonrpc.ErrorResponse):
                    self._resolve(item)

    async def request(self, method: str, params: dict[str, JsonValue], *, timeout_s: float) -> JsonValue:
        """Send a `sup/*` request and wait (bounded) for the supervisor's response."""
        adapter_id = next(self._ids)
        frame = control.UP_ADAPTER.validate_python(
            {"jsonrpc": "2.0", "id": adapter_id, "method": method, "params": params}
        )
        done = anyio.Event()
        slot: list[Any] = []
        self._waiting[adapter_id] = (done, slot)
        try:
            if not self.send(frame):
                raise ChannelClosed("control channel closed")
            with anyio.fail_after(timeout_s):
                await done.wait()
        finally:
            self._waiting.pop(adapter_id, None)
        response = slot[0]
        if isinstance(response, jsonrpc.ErrorResponse):
            raise RuntimeError(f"supervisor error {response.error.code}: {response.error.message}")
        result: JsonValue = response.result
        return result

    def _resolve(self, response: jsonrpc.Response | jsonrpc.ErrorResponse) -> None:
        if not isinstance(response.id, int):
            return
        waiting = self._waiting.get(response.id)
        if waiting is not None:
            waiting[1].append(response)
            waiting[0].set()

    def close(self) -> None:
        self.flush_notes()
        with self._write_lock:
            self._closed = True
        for fd in (self._wake_r, self._wake_w):
            with contextlib.suppress(OSError):
                os.close(fd)
