"""One API connection: a bounded reader and an in-order processor (docs/design.md §9, §17).

The reader enforces the frame cap, the per-frame deadline (slowloris) and the idle timeout, and
hands whole frames through a small bounded queue to the processor, which parses, dispatches to the
`Backend` and writes each answer within the write deadline. A client that hangs up entirely
cancels the request in flight; a client that only half-closes still gets its answers.
"""

from __future__ import annotations

import select
import socket
from collections.abc import AsyncGenerator, AsyncIterator, Callable
from dataclasses import dataclass
from typing import assert_never

import anyio
import anyio.lowlevel
import structlog
from anyio.streams.memory import MemoryObjectReceiveStream, MemoryObjectSendStream

from agentd.api.backend import READ_METHODS, Backend, ReadMethods
from agentd.api.frames import (
    FrameFault,
    error_frame,
    event_frame,
    parse_envelope,
    parse_request,
    result_frame,
    task_changed_frame,
)
from agentd.api.limits import FAREWELL_WRITE_S, ApiLimits
from agentd.api.loop_bridge import LoopBridge
from agentd.api.peercred import Caller
from agentd.errors import AgentdError, ApiError
from protocol.api import (
    ApiRequest,
    ApprovalDecideRequest,
    ApprovalListRequest,
    BudgetsRequest,
    CancelRequest,
    EventsParams,
    EventsRequest,
    EventView,
    ExtendRequest,
    ForkRequest,
    GetRequest,
    ListRequest,
    MatchRequest,
    ScheduleCreateRequest,
    ScheduleDeleteRequest,
    ScheduleGetRequest,
    ScheduleListRequest,
    SchedulePauseRequest,
    ScheduleResumeRequest,
    StatusRequest,
    SubmitRequest,
    TaskRef,
    TaskView,
    TranscriptRequest,
    TreeRequest,
    TriggerListRequest,
    TriggerPauseRequest,
    TriggerRestartRequest,
    TriggerResumeRequest,
    WaitRequest,
    WatchEnded,
    WatchParams,
    WatchRequest,
)
from protocol.framing import LineSplitter, Oversize
from protocol.jsonrpc import INTERNAL_ERROR, INVALID_PARAMS, INVALID_REQUEST

EV_CONNECT = "api.connect"
EV_DISCONNECT = "api.disconnect"
EV_ERROR = "api.error"
# How a client ends an ordinary command: logged at debug, like the connect (every `agentd status`
# is one). Any other ending (idle, a deadline, oversize, faults, a reset) is logged at info.
ORDINARY_ENDINGS = frozenset({"eof", "peer closed"})

READ_CHUNK = 64 * 1024
ITERATOR_CLOSE_S = 5.0  # bound on a backend event iterator's cleanup

_Frame = bytes | Oversize  # a line read from a client, or the marker of one over the cap


class _ConnectionLost(AgentdError):
    """The client can no longer be written to (it hung up, or stopped reading)."""

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


@dataclass(frozen=True, slots=True)
class Split:
    """How requests are answered when the API runs on a loop of its own: `READ_METHODS` there by
    `reads`, every other method by the `Backend` on the daemon's loop, after which `handed_off`
    is called (so later reads see its effects)."""

    bridge: LoopBridge
    reads: ReadMethods
    handed_off: Callable[[], None]


class Connection:
    """One client: its reader, its in-order processor, and the accounting logged at close."""

    def __init__(
        self,
        sock: socket.socket,
        caller: Caller,
        backend: Backend,
        limits: ApiLimits,
        log: structlog.typing.FilteringBoundLogger,
        split: Split | None = None,
    ) -> None:
        self._sock = sock
        self._caller = caller
        self._backend = backend
        # Invariant: with a split, this object lives on the API's loop; only `_dispatch_on` and
        # what it calls (`_stream_*`, `_send`) run on the daemon's loop, for a handed-off request.
        self._split = split
        self._limits = limits
        self._log = log
        self._write_lock = anyio.Lock()
        self._scope = anyio.CancelScope()
        # Invariant: True exactly while the processor is answering a frame (the reader then
        # does not apply the idle timeout).
        self._busy = False
        self._last_activity = anyio.current_time()
        self._queued = 0
        self._reason: str | None = None
        self._requests = 0
        self._faults = 0
        self._consecutive_faults = 0

    async def run(self) -> None:
        """Serve until the client leaves or is cut off; nothing the client sends raises out of here."""
        started = anyio.current_time()
        self._log.debug(EV_CONNECT, gid=self._caller.gid, admin=self._caller.is_admin)
        send, receive = anyio.create_memory_object_stream[_Frame](self._limits.max_pipelined_frames)
        try:
            with self._scope:
                async with anyio.create_task_group() as tg:
                    tg.start_soon(self._read_frames, send)
                    await self._process(receive)
                    tg.cancel_scope.cancel()  # answered everything the reader let through
        finally:
            reason = self._reason or "eof"
            log = self._log.debug if reason in ORDINARY_ENDINGS else self._log.info
            log(
                EV_DISCONNECT,
                reason=reason,
                requests=self._requests,
                faults=self._faults,
                dur_ms=round((anyio.current_time() - started) * 1000),
            )

    def _close(self, reason: str) -> None:
        if self._reason is None:
            self._reason = reason
        self._scope.cancel()

    # ---- reading -------------------------------------------------------------------------

    async def _read_frames(self, frames: MemoryObjectSendStream[_Frame]) -> None:
        limits = self._limits
        splitter = LineSplitter(limits.max_frame)
        # Invariant: set (an absolute instant) exactly while a partial frame is buffered.
        frame_deadline: float | None = None
        async with frames:
            while True:
                now = anyio.current_time()
                if frame_deadline is not None:
                    deadline = frame_deadline
                elif self._busy or self._queued:
                    deadline = now + limits.idle_timeout_s  # not idle: just re-check later
                else:
                    deadline = self._last_activity + limits.idle_timeout_s
                data: bytes | None = None
                with anyio.CancelScope(deadline=deadline):
                    try:
                        data = await receive_some(self._sock)
                    except OSError:
                        self._close("reset")
                        return
                if data is None:
                    now = anyio.current_time()
                    if frame_deadline is not None:
                        await self._farewell(
                            "frame deadline",
                            f"invalid request: frame not completed within {limits.frame_deadline_s:g}s",
                        )
                        return
                    if (
                        not (self._busy or self._queued)
                        and now >= self._last_activity + limits.idle_timeout_s
                    ):
                        self._close("idle")
                        return
                    continue
                if not data:
                    for line in splitter.close():
                        await self._forward(frames, line)
                    if _peer_hung_up(self._sock):
                        self._close("peer closed")  # nobody will read an answer: stop working on it
                    # A half-close: answer what was sent, then close. The socket is no longer
                    # watched, so a later full close is noticed at the next write.
                    return
                had_partial = splitter.buffered > 0
                lines = splitter.feed(data)
                if splitter.discarding:
                    lines.append(Oversize(limits.max_frame + 1))
                for line in lines:
                    if isinstance(line, Oversize):
                        # Frames before it are answered first; nothing after it is read.
                        await self._forward(frames, line)
                        return
                    await self._forward(frames, line)
                now = anyio.current_time()
                if splitter.buffered or any(isinstance(line, Oversize) or line.strip() for line in lines):
                    # Blank lines are not activity: a trickle of newlines must not hold a
                    # connection open forever.
                    self._last_activity = now
                if not splitter.buffered:
                    frame_deadline = None
                elif lines or not had_partial:
                    # A new frame began in this chunk. Counting from now, after any wait for the
                    # processor, charges the client only for time we spent waiting on it.
                    frame_deadline = now + limits.frame_deadline_s

    async def _forward(self, frames: MemoryObjectSendStream[_Frame], line: bytes | Oversize) -> None:
        if isinstance(line, bytes) and not line.strip():
            return  # blank lines are keep-alive noise, not frames
        self._queued += 1
        await frames.send(line)

    async def _farewell(self, reason: str, message: str) -> None:
        """Tell the client why it is being cut off (best effort, bounded), then close."""
        self._faults += 1
        with anyio.move_on_after(FAREWELL_WRITE_S):
            try:
                await self._send(error_frame(None, INVALID_REQUEST, message))
            except _ConnectionLost:
                pass
        self._close(reason)

    # ---- answering -----------------------------------------------------------------------

    async def _process(self, frames: MemoryObjectReceiveStream[_Frame]) -> None:
        try:
            async with frames:
                async for line in frames:
                    self._queued -= 1
                    if isinstance(line, Oversize):
                        await self._farewell(
                            "oversize", f"invalid request: frame exceeds {self._limits.max_frame} bytes"
                        )
                        return
                    self._busy = True
                    try:
                        await self._answer(line)
                    finally:
                        self._busy = False
                        self._last_activity = anyio.current_time()
                    if self._consecutive_faults >= self._limits.max_consecutive_faults:
                        await self._farewell("faults", "invalid request: too many invalid frames in a row")
                        return
        except _ConnectionLost as exc:
            self._close(exc.reason)

    async def _answer(self, line: bytes) -> None:
        """Answer one frame. Nothing the frame or the backend does escapes as an exception."""
        request = self._parse(line)
        if isinstance(request, FrameFault):
            self._fault()
            frame = error_frame(request.id, request.code, request.message)
        else:
            frame = await self._respond(request)
        await self._send(frame)

    def _parse(self, line: bytes) -> ApiRequest | FrameFault:
        envelope = parse_envelope(line, max_frame=self._limits.max_frame)
        if isinstance(envelope, FrameFault):
            return envelope
        self._requests += 1  # a request, even if its method or its params turn out wrong
        return parse_request(envelope)

    async def _respond(self, request: ApiRequest) -> bytes:
        """The frame answering a valid request: its result, or the error the backend raised."""
        try:
            result = await self._dispatch(request)
        except _ConnectionLost:
            raise
        except ApiError as exc:
            self._consecutive_faults = 0
            return error_frame(request.id, exc.code, exc.message, retryable=exc.retryable)
        except Exception as exc:  # noqa: BLE001 - the per-request top-level handler: a backend (or
            # our) bug becomes an internal error for this request; the connection and server go on.
            self._log.error(EV_ERROR, method=request.method, err=type(exc).__name__, exc_info=exc)
            return error_frame(request.id, INTERNAL_ERROR, "internal error (details are in the daemon's log)")
        self._consecutive_faults = 0
        if len(result) > self._limits.max_response_bytes:
            return error_frame(
                request.id,
                INVALID_PARAMS,
                f"the result is {len(result)} bytes, over the {self._limits.max_response_bytes}-byte cap; "
                "ask for less (e.g. a smaller limit)",
            )
        return result_frame(request.id, result)

    def _fault(self) -> None:
        self._faults += 1
        self._consecutive_faults += 1

    async def _dispatch(self, request: ApiRequest) -> bytes:
        """Answer the request where it belongs; its result serialised by the request's type."""
        split = self._split
        if split is None:
            return await self._dispatch_on(self._backend, request)
        if request.method in READ_METHODS:
            return await self._dispatch_read(split.reads, request)
        try:
            return await split.bridge.on_main(self._dispatch_on, self._backend, request)
        finally:
            split.handed_off()

    async def _dispatch_read(self, reads: ReadMethods, request: ApiRequest) -> bytes:
        caller = self._caller
        match request:
            case GetRequest():
                return request.dump_result(await reads.get(caller, request.params))
            case ListRequest():
                return request.dump_result(await reads.list(caller, request.params))
            case MatchRequest():
                return request.dump_result(await reads.match(caller, request.params))
            case StatusRequest():
                return request.dump_result(await reads.status(caller))
            case _:
                raise AssertionError(f"{request.method} is not a read method")

    async def _dispatch_on(self, backend: Backend, request: ApiRequest) -> bytes:
        """Run the request against `backend`; its result serialised by the request's type."""
        caller = self._caller
        match request:
            case SubmitRequest():
                return request.dump_result(await backend.submit(caller, request.params))
            case GetRequest():
                return request.dump_result(await backend.get(caller, request.params))
            case ListRequest():
                return request.dump_result(await backend.list(caller, request.params))
            case MatchRequest():
                return request.dump_result(await backend.match(caller, request.params))
            case CancelRequest():
                return request.dump_result(await backend.cancel(caller, request.params))
            case WaitRequest():
                return request.dump_result(await backend.wait(caller, request.params))
            case EventsRequest():
                return request.dump_result(await self._stream_events(request.params))
            case WatchRequest():
                await self._stream_changes(request.params)
                return request.dump_result(WatchEnded())
            case TreeRequest():
                return request.dump_result(await backend.tree(caller, request.params))
            case TranscriptRequest():
                return request.dump_result(await backend.transcript(caller, request.params))
            case ForkRequest():
                return request.dump_result(await backend.fork(caller, request.params))
            case ExtendRequest():
                return request.dump_result(await backend.extend(caller, request.params))
            case StatusRequest():
                return request.dump_result(await backend.status(caller))
            case ScheduleCreateRequest():
                return request.dump_result(await backend.schedule_create(caller, request.params))
            case ScheduleListRequest():
                return request.dump_result(await backend.schedule_list(caller, request.params))
            case ScheduleGetRequest():
                return request.dump_result(await backend.schedule_get(caller, request.params))
            case SchedulePauseRequest():
                return request.dump_result(await backend.schedule_pause(caller, request.params))
            case ScheduleResumeRequest():
                return request.dump_result(await backend.schedule_resume(caller, request.params))
            case ScheduleDeleteRequest():
                return request.dump_result(await backend.schedule_delete(caller, request.params))
            case ApprovalListRequest():
                return request.dump_result(await backend.approval_list(caller, request.params))
            case ApprovalDecideRequest():
                return request.dump_result(await backend.approval_decide(caller, request.params))
            case TriggerListRequest():
                return request.dump_result(await backend.trigger_list(caller))
            case TriggerPauseRequest():
                return request.dump_result(await backend.trigger_pause(caller, request.params))
            case TriggerResumeRequest():
                return request.dump_result(await backend.trigger_resume(caller, request.params))
            case TriggerRestartRequest():
                return request.dump_result(await backend.trigger_restart(caller, request.params))
            case BudgetsRequest():
                return request.dump_result(await backend.budget_list(caller))
            case _:
                assert_never(request)

    async def _stream_events(self, params: EventsParams) -> TaskView:
        """Send each event as a notification; the result is the task as it stands afterwards."""
        events = self._backend.events(self._caller, params)
        try:
            async for event in events:
                await self._send(event_frame(event))
        finally:
            await _close_iterator(events)
        return await self._backend.get(self._caller, TaskRef(task_id=params.task_id))

    async def _stream_changes(self, params: WatchParams) -> None:
        """Send each changed task as a notification until the daemon stops watching."""
        changes = self._backend.watch(self._caller, params)
        try:
            async for view in changes:
                await self._send(task_changed_frame(view))
        finally:
            await _close_iterator(changes)

    async def _send(self, frame: bytes) -> None:
        """Write one frame within the write deadline. Raises `_ConnectionLost`."""
        split = self._split
        if split is not None and not split.bridge.on_api_loop:
            # A handed-off stream: the socket and its write lock are the API loop's.
            await split.bridge.on_api(self._send_here, frame)
        else:
            await self._send_here(frame)

    async def _send_here(self, frame: bytes) -> None:
        async with self._write_lock:
            with anyio.move_on_after(self._limits.write_deadline_s) as scope:
                try:
                    await send_all(self._sock, frame)
                except OSError as exc:
                    raise _ConnectionLost("peer gone") from exc
            if scope.cancelled_caught:
                raise _ConnectionLost("write deadline")


async def receive_some(sock: socket.socket) -> bytes:
    """Read what is available from a non-blocking socket (b"" at end of stream).

    Raw socket calls over `anyio.wait_readable` rather than anyio's socket streams: on asyncio,
    their readiness callback raises InvalidStateError when a cancel and the peer's data land in
    the same loop iteration, and cancels (deadlines) are routine here.
    """
    while True:
        # Waiting first (not only on EAGAIN) yields to the loop on every read, so a client
        # flooding blank lines cannot starve other connections.
        await anyio.wait_readable(sock)
        try:
            return sock.recv(READ_CHUNK)
        except BlockingIOError:
            continue


async def send_all(sock: socket.socket, data: bytes) -> None:
    """Write all of `data` to a non-blocking socket. Raises `OSError` if the peer is gone."""
    await anyio.lowlevel.checkpoint()
    view = memoryview(data)
    while view:
        try:
            sent = sock.send(view)
        except BlockingIOError:
            await anyio.wait_writable(sock)
            continue
        view = view[sent:]


async def _close_iterator(events: AsyncIterator[EventView] | AsyncIterator[TaskView]) -> None:
    """Close a backend's event generator promptly, even while our task is being cancelled."""
    if isinstance(events, AsyncGenerator):
        with anyio.CancelScope(shield=True), anyio.move_on_after(ITERATOR_CLOSE_S):
            await events.aclose()


def _peer_hung_up(sock: socket.socket) -> bool:
    """True if the peer closed its socket entirely (POLLHUP), not just its writing half."""
    poller = select.poll()
    poller.register(sock.fileno(), select.POLLHUP)
    return any(mask & select.POLLHUP for _, mask in poller.poll(0))
