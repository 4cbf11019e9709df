"""One supervised subagent process: its channel, liveness, kill ladder and exit (docs/design.md §3, §6).

`SupervisedChild.run` owns the child from the spawn frame to the reaped exit status: it reads
frames with a 16 MiB line cap (a longer line — a flood without newlines — is a fatal protocol
fault), writes with a deadline, pings and evaluates the detectors, re-emits stderr with a size
cap, climbs the kill ladder when asked or when a detector fires, and reaps the child through its
pidfd. It returns exactly one `RunResult`: the child's own, or one the supervisor attributes.
"""

from __future__ import annotations

import collections
import contextlib
import os
import random
import select
import signal
from dataclasses import dataclass
from typing import Protocol

import anyio
from pydantic import BaseModel, JsonValue

from agentd.spawning.cgroup import CgroupLeaf
from agentd.spawning.spawner import SpawnedProcess
from agentd.supervision.child_pipes import reap, relay_stderr, write_all
from agentd.supervision.liveness import (
    ExitInfo,
    KillCause,
    LivenessPolicy,
    Observation,
    Verdict,
    classify,
    classify_exit,
    first_ping_at,
    next_check_time,
    next_ping_at,
    ping_due,
)
from agentd.supervision.payloads import with_deadline
from agentd.supervision.watch_clock import MAX_TICK_S, WatchClock
from processes.climb import LadderTarget, climb
from processes.ladder import LadderPolicy, RungAction, plan
from processes.linux import signal_pidfd
from processes.pipes import read_chunk
from protocol import control, jsonrpc
from protocol.framing import MAX_FRAME, FrameError, LineSplitter, Oversize, decode, encode
from protocol.result import RunResult
from protocol.spawn import REVEAL_SECRETS, SpawnPayload

STDERR_LINE_CAP = 8192
STDERR_TAIL_LINES = 40
WRITE_TIMEOUT_S = 5.0
DRAIN_AFTER_EXIT_S = 1.0
RTT_SAMPLES = 256

SupRequest = (
    control.SupSpawn
    | control.SupWait
    | control.SupStatus
    | control.SupCancel
    | control.SupApprove
    | control.SupRecord
)


@dataclass(frozen=True, slots=True)
class ChildIdentity:
    task_id: str
    run_id: str
    handle: str


class ChildListener(Protocol):
    """What a `SupervisedChild` reports to its owner (all called on the event loop)."""

    def on_ready(self, child: SupervisedChild) -> None: ...
    def on_event(self, child: SupervisedChild, params: control.EventParams) -> None: ...
    def on_usage(self, child: SupervisedChild, params: control.UsageParams) -> None: ...
    def on_result(self, child: SupervisedChild, result: RunResult) -> None: ...
    def on_turn(self, child: SupervisedChild, params: control.TurnParams) -> None: ...
    def on_stderr(self, child: SupervisedChild, line: str) -> None: ...
    def on_verdict(self, child: SupervisedChild, verdict: Verdict) -> None: ...
    def on_rung(self, child: SupervisedChild, rung: RungAction, cause: KillCause) -> None: ...
    async def on_request(self, child: SupervisedChild, request: SupRequest) -> JsonValue: ...


class _Detached:
    """The listener of a child whose supervision has ended: it hears nothing more. Dropping the
    real one breaks the child ↔ listener ↔ owner cycle, so a finished task's objects are freed as
    their last reference goes, not by a full collection."""

    def on_ready(self, child: SupervisedChild) -> None:
        pass

    def on_event(self, child: SupervisedChild, params: control.EventParams) -> None:
        pass

    def on_usage(self, child: SupervisedChild, params: control.UsageParams) -> None:
        pass

    def on_result(self, child: SupervisedChild, result: RunResult) -> None:
        pass

    def on_turn(self, child: SupervisedChild, params: control.TurnParams) -> None:
        pass

    def on_stderr(self, child: SupervisedChild, line: str) -> None:
        pass

    def on_verdict(self, child: SupervisedChild, verdict: Verdict) -> None:
        pass

    def on_rung(self, child: SupervisedChild, rung: RungAction, cause: KillCause) -> None:
        pass

    async def on_request(self, child: SupervisedChild, request: SupRequest) -> JsonValue:
        return {"refused": "the subagent's supervision has ended"}


DETACHED = _Detached()


class SupervisedChild:
    def __init__(
        self,
        proc: SpawnedProcess,
        identity: ChildIdentity,
        listener: ChildListener,
        *,
        deadline: float,
        liveness: LivenessPolicy | None = None,
        ladder: LadderPolicy | None = None,
        cgroup: CgroupLeaf | None = None,
        teardown_grace_s: float = 10.0,
        stderr_line_cap: int = STDERR_LINE_CAP,
        clock: WatchClock | None = None,
    ) -> None:
        self.proc = proc
        self.identity = identity
        self.listener = listener
        self.deadline = deadline
        self.liveness = liveness or LivenessPolicy()
        self.ladder = ladder or LadderPolicy()
        self.cgroup = cgroup
        self.teardown_grace_s = teardown_grace_s
        self.stderr_line_cap = stderr_line_cap
        # Checks this child's liveness with every other's; None (or a clock not serving): its own task.
        self.clock = clock
        self.spawned_at = anyio.current_time()
        self.ready = False
        self.result: RunResult | None = None
        self.result_at: float | None = None
        self.exit_info: ExitInfo | None = None
        self.faults = 0
        self.outstanding_pings = 0
        self.last_loop_age_ms: int | None = None
        self.last_rtt_s: float | None = None
        # The latest ping round trips, oldest first; a reader may drain it (benches, diagnostics).
        self.recent_rtts_s: collections.deque[float] = collections.deque(maxlen=RTT_SAMPLES)
        self.eof_at: float | None = None
        self.kill_cause: KillCause | None = None
        self.top_rung: RungAction | None = None
        self._ping_seq = 0
        self._ping_sent: dict[int, float] = {}
        self._next_ping = self.spawned_at + self.liveness.ping_interval_s
        self.next_check_at = self.spawned_at
        # fast_acquire: an uncontended acquire does not yield to the event loop first. Without it
        # every frame (each ping) waited a full pass of the ready queue before its write, which
        # with 100 children was most of the ping round trip's excess over a bare loop.
        self._write_lock = anyio.Lock(fast_acquire=True)
        self._exited = anyio.Event()
        self._stdout_done = anyio.Event()
        self._stderr_tail: collections.deque[str] = collections.deque(maxlen=STDERR_TAIL_LINES)
        self._tg: anyio.abc.TaskGroup | None = None
        self._ladder_running = False
        # A stop requested before `run` started: applied first thing, instead of the spawn frame.
        self._pending_stop: tuple[KillCause, RungAction, str] | None = None

    @property
    def pid(self) -> int:
        return self.proc.pid

    @property
    def exited(self) -> bool:
        return self._exited.is_set()

    def observation(self) -> Observation:
        return Observation(
            spawned_at=self.spawned_at,
            deadline=self.deadline,
            ready=self.ready,
            outstanding_pings=self.outstanding_pings,
            last_loop_age_ms=self.last_loop_age_ms,
            eof_at=self.eof_at,
            faults=self.faults,
            result_received=self.result is not None,
        )

    # ---- lifecycle ---------------------------------------------------------------------------

    async def run(self, payload: SpawnPayload, *, held: SpawnPayload | None = None) -> RunResult:
        """Supervise the child to its reaped exit; return its one terminal result.

        `held`: the child was prestarted with this payload and waits for `ctrl/go` (a trigger's
        task, agentd/supervision/parking.py), which is sent instead of `ctrl/spawn`: `payload`'s
        instruction if it differs (a newer delivery), and the time left of the deadline."""
        try:
            async with anyio.create_task_group() as tg:
                self._tg = tg
                tg.start_soon(self._read_frames)
                tg.start_soon(self._relay_stderr)
                self._next_ping = first_ping_at(
                    anyio.current_time(), self.liveness.ping_interval_s, random.random()
                )
                if self.clock is None or not self.clock.add(self):
                    tg.start_soon(self._watch)
                try:
                    if self._pending_stop is not None:
                        # Stopped before it was given its task: it is idle, so skip the cancel rung.
                        cause, start, reason = self._pending_stop
                        self.stop(cause, start="sigkill" if start == "sigkill" else "sigterm", reason=reason)
                    elif not await self.send(self._first_frame(payload, held), reveal=held is None):
                        self.stop("faulty", start="sigterm")
                    await self._wait_exit()
                    with anyio.move_on_after(DRAIN_AFTER_EXIT_S):
                        await self._stdout_done.wait()
                finally:
                    # Before the task group closes: the clock must not start anything in it after.
                    if self.clock is not None:
                        self.clock.discard(self)
                tg.cancel_scope.cancel()
        finally:
            if not self.exited:
                # Left early (cancelled, or an error in our own code): the child must not
                # outlive its supervision. Kill it and reap it, shielded and bounded.
                self._signal_group(signal.SIGKILL)
                self._kill_cgroup()
                with anyio.CancelScope(shield=True), anyio.move_on_after(self.ladder.kill_reap_s):
                    await self._wait_exit()
            self.proc.close_fds()
            # Read before the leaf is retired: its memory.events goes with it.
            oom_killed = self.cgroup.oom_killed() if self.cgroup else False
            if self.cgroup is not None:
                with anyio.CancelScope(shield=True):
                    await self.cgroup.retire()
            self.listener = DETACHED  # supervision is over, on every path
        assert self.exit_info is not None
        return classify_exit(
            self.result,
            self.exit_info,
            kill_cause=self.kill_cause,
            sigkilled_by_us=self.top_rung == "sigkill",
            oom_killed=oom_killed,
            stderr_tail="\n".join(self._stderr_tail) if self.result is None else "",
        )

    def _first_frame(self, payload: SpawnPayload, held: SpawnPayload | None) -> control.Spawn | control.Go:
        if held is None:
            return control.Spawn(params=self._as_sent(payload))
        instruction = payload.instruction if payload.instruction != held.instruction else None
        left = self._as_sent(payload).limits.deadline_s
        return control.Go(params=control.GoParams(instruction=instruction, deadline_s=left))

    def _as_sent(self, payload: SpawnPayload) -> SpawnPayload:
        # The child times itself from the frame's arrival: it gets what is left of our deadline,
        # so its deadline and this supervisor's backstop name the same instant.
        return with_deadline(payload, self.deadline, now=anyio.current_time())

    def stop(self, cause: KillCause, *, start: RungAction = "cancel", reason: str = "") -> None:
        """Start the kill ladder (once); a later, harder request (`start="sigkill"`) escalates at once."""
        if self.exited:
            return
        if self._tg is None:
            if self._pending_stop is None or start == "sigkill":
                self._pending_stop = (cause, start, reason)
            return
        if self.kill_cause is None:
            self.kill_cause = cause  # the first cause decides an attributed status
        if self._ladder_running:
            if start == "sigkill":
                self._signal_group(signal.SIGKILL)
                self._kill_cgroup()
                self.top_rung = "sigkill"
            return
        self._ladder_running = True
        if self.eof_at is not None and start == "cancel":
            start = "sigterm"  # it cannot read a cancel it will never answer
        self._tg.start_soon(self._climb, plan(self.ladder, start=start), reason or cause, cause)

    async def _climb(self, rungs: tuple, reason: str, cause: KillCause) -> None:  # type: ignore[type-arg]
        target = LadderTarget(
            request_exit=self._send_cancel,
            signal_group=self._signal_group,
            kill_cgroup=self._kill_cgroup,
            wait_exited=self._exited.wait,
        )

        def on_rung(rung: RungAction) -> None:
            self.top_rung = rung
            self.listener.on_rung(self, rung, cause)

        await climb(target, rungs, reason, on_rung)

    async def _send_cancel(self, reason: str) -> None:
        await self.send(control.Cancel(params=control.CancelParams(reason=reason[:1000])))

    def _signal_group(self, sig: int) -> None:
        if self.exited:
            return  # never signal after reaping: the pid may belong to someone else now
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(self.proc.pid, sig)
        with contextlib.suppress(OSError):
            signal_pidfd(self.proc.pidfd, sig)

    def _kill_cgroup(self) -> None:
        if self.cgroup is not None:
            self.cgroup.kill()

    async def _wait_exit(self) -> None:
        self.exit_info = await reap(self.proc.pidfd)
        self._exited.set()

    # ---- writing -----------------------------------------------------------------------------

    async def send(self, message: BaseModel, *, reveal: bool = False) -> bool:
        """Write one frame within `WRITE_TIMEOUT_S`; False when the child is gone or not reading."""
        data = encode(message, context=REVEAL_SECRETS if reveal else None)
        async with self._write_lock:
            return await write_all(self.proc.stdin_fd, data, WRITE_TIMEOUT_S)

    # ---- reading -----------------------------------------------------------------------------

    async def _read_frames(self) -> None:
        splitter = LineSplitter(MAX_FRAME)
        try:
            while True:
                chunk = await read_chunk(self.proc.stdout_fd)
                for line in splitter.feed(chunk) if chunk else splitter.close():
                    await self._dispatch(line)
                if splitter.discarding:
                    # A line past the cap: flooding or broken. Stop reading it; kill the child.
                    self.faults = self.liveness.max_faults
                    self.stop("faulty", start="sigterm", reason="control frame over the 16 MiB cap")
                    return
                if not chunk:
                    self.eof_at = anyio.current_time()
                    return
        finally:
            self._stdout_done.set()

    async def _dispatch(self, line: bytes | Oversize) -> None:
        message = decode(line, control.UP_ADAPTER)
        if isinstance(message, FrameError):
            self.faults += 1
            self.listener.on_stderr(self, f"[agentd] bad control frame: {message.kind}: {message.detail}")
        elif isinstance(message, jsonrpc.Response):
            self._on_pong(message)
        elif isinstance(message, control.Event):
            self.listener.on_event(self, message.params)
        elif isinstance(message, control.Usage):
            self.listener.on_usage(self, message.params)
        elif isinstance(message, control.Ready):
            self.ready = True
            self.listener.on_ready(self)
        elif isinstance(message, control.Result):
            if self.result is not None:
                self.faults += 1
                return
            self.result = message.params
            self.result_at = anyio.current_time()
            self.listener.on_result(self, message.params)
        elif isinstance(message, control.Turn):
            self.listener.on_turn(self, message.params)
        elif isinstance(message, jsonrpc.ErrorResponse):
            self.faults += 1
        else:
            assert self._tg is not None
            self._tg.start_soon(self._answer, message)

    def _on_pong(self, message: jsonrpc.Response) -> None:
        try:
            pong = control.PingResult.model_validate(message.result)
        except ValueError:
            self.faults += 1
            return
        sent = self._ping_sent.pop(pong.seq, None)
        if sent is not None:
            self.last_rtt_s = anyio.current_time() - sent
            self.recent_rtts_s.append(self.last_rtt_s)
        self._ping_sent = {k: v for k, v in self._ping_sent.items() if k > pong.seq}
        self.outstanding_pings = len(self._ping_sent)
        self.last_loop_age_ms = pong.loop_age_ms

    async def _answer(self, request: SupRequest) -> None:
        try:
            result = await self.listener.on_request(self, request)
        except LookupError as exc:
            error = jsonrpc.ErrorData(code=jsonrpc.INVALID_PARAMS, message=str(exc)[:500])
            await self.send(jsonrpc.ErrorResponse(id=request.id, error=error))
            return
        await self.send(jsonrpc.Response(id=request.id, result=result))

    async def _relay_stderr(self) -> None:
        await relay_stderr(self.proc.stderr_fd, self.stderr_line_cap, self._on_stderr)

    def _on_stderr(self, line: str) -> None:
        self._stderr_tail.append(line)
        self.listener.on_stderr(self, line)

    # ---- liveness ----------------------------------------------------------------------------

    @property
    def tick_s(self) -> float:
        """How often its liveness is checked."""
        return min(self.liveness.ping_interval_s, MAX_TICK_S)

    def watch_alone(self) -> None:
        """The shared clock stopped: check this child from a task of its own from now on."""
        if self._tg is not None and not self.exited:
            self._tg.start_soon(self._watch)

    async def _watch(self) -> None:
        while not self.exited:
            self.check_liveness(anyio.current_time())
            await anyio.sleep(max(0.0, self.next_check_at - anyio.current_time()))

    def check_liveness(self, now: float) -> None:
        """One check: the teardown grace after a result, a ping when due, then the detectors."""
        if self.exited or self._tg is None:
            return
        if self.result is not None:
            if self.result_at is not None and now - self.result_at >= self.teardown_grace_s:
                self.stop("teardown", start="sigterm", reason="did not exit after its result")
        elif self.ready and ping_due(now, self._next_ping) and self.eof_at is None:
            self._ping_seq += 1
            self._ping_sent[self._ping_seq] = now
            self.outstanding_pings = len(self._ping_sent)
            self._ping(self._ping_seq)
            self._next_ping = next_ping_at(self._next_ping, now, self.liveness.ping_interval_s)
        self.next_check_at = next_check_time(now, self.tick_s, self._next_ping)
        verdict = classify(self.observation(), self.liveness, now)
        if verdict != "ok" and not self._ladder_running:
            self.listener.on_verdict(self, verdict)
            cause: KillCause = (
                "deadline" if verdict == "deadline" else ("faulty" if verdict == "faulty" else "stuck")
            )
            self.stop(cause, start="cancel" if verdict == "deadline" else "sigterm", reason=verdict)

    def _ping(self, seq: int) -> None:
        """Write the ping now when no other frame is being written: a frame of at most PIPE_BUF
        bytes goes into a pipe whole or not at all, so it cannot interleave with another. Otherwise
        (a frame mid-write, a full pipe) a task sends it. A task per ping cost the loop a task's
        start and stamped the round trip before the write (the ping p99 with 100 children)."""
        ping = control.Ping(id=seq, params=control.PingParams(seq=seq))
        data = encode(ping)
        if not self._write_lock.locked() and len(data) <= select.PIPE_BUF:
            try:
                if os.write(self.proc.stdin_fd, data) == len(data):
                    return
            except BlockingIOError:
                pass  # the pipe is full: wait for it below
            except OSError:
                self.stop("stuck", start="sigterm", reason="control channel not writable")
                return
            else:  # not a pipe after all: a frame's start is out, and its rest would race others
                self.stop("faulty", start="sigterm", reason="control channel took part of a ping")
                return
        assert self._tg is not None
        self._tg.start_soon(self._send_ping, ping)

    async def _send_ping(self, ping: control.Ping) -> None:
        if not await self.send(ping):
            self.stop("stuck", start="sigterm", reason="control channel not writable")
