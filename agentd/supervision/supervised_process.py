"""One supervised process over its NDJSON channel: the mechanism a subagent (`SupervisedChild`)
and a resource watcher (`WatcherProcess`) share (docs/design.md §2, §3, §6).

`SupervisedProcess` owns the process from its first frame to its reaped exit status: it reads
frames with the 16 MiB line cap (a longer line — a flood without newlines — is a fatal protocol
fault), writes each frame whole under one write lock and within a deadline, pings on the liveness
interval from the shared watch clock, evaluates the detectors of `liveness`, re-emits stderr with a
size cap, climbs the kill ladder once, and reaps the process through its pidfd. A subclass is a
policy: which up-frames it reads beyond the shared ones (`ctrl/ready`, pongs, error responses),
what its first frame is, what a verdict or a stop means for it. A frame both kinds of process speak
is handled here, once.
"""

from __future__ import annotations

import collections
import contextlib
import math
import os
import random
import select
import signal
from collections.abc import Callable
from dataclasses import replace
from typing import Any, ClassVar

import anyio
import anyio.abc
from pydantic import BaseModel, TypeAdapter

from agentd.spawning.cgroup import CgroupLeaf
from agentd.spawning.spawner import SpawnedProcess
from agentd.supervision.child_pipes import reap, relay_stderr, write_all
from agentd.supervision.liveness import (
    ExitInfo,
    KillCause,
    LivenessPolicy,
    Observation,
    SilentVerdict,
    Verdict,
    classify,
    first_ping_at,
    next_check_time,
    next_ping_at,
    overdue,
    ping_due,
)
from agentd.supervision.starvation import Silence, observe_silence
from agentd.supervision.watch_clock import MAX_TICK_S, WatchClock
from processes.climb import LadderTarget, climb
from processes.ladder import LadderPolicy, RungAction, plan
from processes.linux import signal_pidfd
from processes.pipes import read_chunk
from processes.sched_facts import read_sched_facts
from protocol import control, jsonrpc
from protocol.framing import MAX_FRAME, FrameError, LineSplitter, Oversize, decode, encode
from protocol.spawn import REVEAL_SECRETS

STDERR_LINE_CAP = 8192
WRITE_TIMEOUT_S = 5.0
DRAIN_AFTER_EXIT_S = 1.0
RTT_SAMPLES = 256


class SupervisedProcess:
    """The shared core; subclasses fill in the policy hooks (the methods that say so)."""

    # What its channel is called in the notes and stop reasons ("control", "watch").
    channel: ClassVar[str] = "control"

    def __init__(
        self,
        proc: SpawnedProcess,
        up_adapter: TypeAdapter[Any],
        *,
        liveness: LivenessPolicy,
        ladder: LadderPolicy,
        deadline: float = math.inf,
        cgroup: CgroupLeaf | None = None,
        stderr_line_cap: int = STDERR_LINE_CAP,
        clock: WatchClock | None = None,
    ) -> None:
        self.proc = proc
        self.up_adapter = up_adapter
        self.liveness = liveness
        self.ladder = ladder
        self.deadline = deadline
        self.cgroup = cgroup
        self.stderr_line_cap = stderr_line_cap
        # Checks this process's liveness with every other's; None (or a clock not serving): its own task.
        self.clock = clock
        self.spawned_at = anyio.current_time()
        self.ready = False
        self.exit_info: ExitInfo | None = None
        self.oom_killed = False
        self.faults = 0
        self.outstanding_pings = 0
        self.last_loop_age_ms: int | None = None
        self.last_rtt_s: float | None = None
        # The latest ping round trips, oldest first; a reader may drain it (benches, diagnostics).
        self.recent_rtts_s: collections.deque[float] = collections.deque(maxlen=RTT_SAMPLES)
        self.eof_at: float | None = None
        # What the scheduler showed of it while its pongs are overdue (starvation.py); None while
        # they are not. `_starved_told`: the policy heard of this silence's starvation.
        self.silence: Silence | None = None
        self._starved_told = False
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
        self._tg: anyio.abc.TaskGroup | None = None
        self._ladder_running = False
        # A stop requested before `_supervise` started: (first rung, reason), applied instead of
        # the first frame.
        self._pending_stop: tuple[RungAction, str] | None = None

    @property
    def pid(self) -> int:
        return self.proc.pid

    @property
    def exited(self) -> bool:
        return self._exited.is_set()

    @property
    def result_received(self) -> bool:
        """Policy: whether it has sent its terminal result (a watcher never does)."""
        return False

    def observation(self) -> Observation:
        return Observation(
            spawned_at=self.spawned_at,
            deadline=self.deadline,
            ready=self.ready,
            outstanding_pings=self.outstanding_pings,
            last_loop_age_ms=self.last_loop_age_ms,
            eof_at=self.eof_at,
            faults=self.faults,
            result_received=self.result_received,
            silence=self.silence,
        )

    # ---- policy hooks --------------------------------------------------------------------------

    def _on_frame(self, message: BaseModel) -> None:
        """Policy: an up-frame the core does not handle itself."""
        self.faults += 1

    def _on_ready(self) -> None:
        """Policy: it sent `ctrl/ready`."""

    def _tell_stderr(self, line: str) -> None:
        """Policy: a stderr line, or a note about its channel, for its owner."""

    def _on_verdict(self, verdict: Verdict) -> None:
        """Policy: a detector fired (no ladder is running yet)."""
        self._stop_within("stuck", "sigterm", verdict)

    def _on_rung(self, rung: RungAction) -> None:
        """Policy: the ladder reached `rung`."""

    def _on_starved(self, silence: Silence, late: SilentVerdict) -> None:
        """Policy: it is overdue (`late`: what it would be stopped as otherwise) but the scheduler
        shows it starved of CPU, so it is given more time (once per silence)."""

    def _stop_within(self, cause: KillCause, start: RungAction, reason: str) -> None:
        """Policy: a stop the core decided (a fault, an unwritable channel, a verdict)."""
        self._request_stop(start, reason)

    def _pinging(self, now: float) -> bool:
        """Policy: whether it is pinged at this check (a subagent is not once it has its result)."""
        return True

    # ---- lifecycle ---------------------------------------------------------------------------

    async def _supervise(self, first: Callable[[], BaseModel], *, reveal: bool) -> ExitInfo:
        """Send the frame `first` makes (as it is written: it may carry the time left), then
        supervise the process to its reaped exit; the process must not outlive this call on any path."""
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
                        # Stopped before it was given its first frame: it is idle and reads no
                        # cancel yet, so skip the cancel rung.
                        start, reason = self._pending_stop
                        self._start_ladder("sigkill" if start == "sigkill" else "sigterm", reason)
                    elif not await self.send(first(), reveal=reveal):
                        self.faults = self.liveness.max_faults
                        self._stop_within("faulty", "sigterm", f"the {self.channel} channel is not writable")
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
                # Left early (cancelled, or an error in our own code): the process must not
                # outlive its supervision. Kill it and reap it, shielded and bounded.
                self._signal_group(signal.SIGKILL)
                self._kill_cgroup()
                with anyio.CancelScope(shield=True), anyio.move_on_after(self.ladder.kill_reap_s):
                    await self._wait_exit()
            self.proc.close_fds()
            if self.cgroup is not None:
                # Read before the leaf is retired: its memory.events goes with it.
                self.oom_killed = self.cgroup.oom_killed()
                with anyio.CancelScope(shield=True):
                    await self.cgroup.retire()
        assert self.exit_info is not None
        return self.exit_info

    async def _wait_exit(self) -> None:
        self.exit_info = await reap(self.proc.pidfd)
        self._exited.set()

    # ---- the kill ladder -----------------------------------------------------------------------

    def _request_stop(self, start: RungAction, reason: str) -> None:
        """Climb the ladder from `start` (once); a later `sigkill` request escalates at once."""
        if self.exited:
            return
        if self._tg is None:
            if self._pending_stop is None or start == "sigkill":
                self._pending_stop = (start, reason)
            return
        if self._ladder_running:
            if start == "sigkill":
                self._signal_group(signal.SIGKILL)
                self._kill_cgroup()
                self.top_rung = "sigkill"
            return
        self._start_ladder(start, reason)

    def _start_ladder(self, start: RungAction, reason: str) -> None:
        if self._ladder_running or self._tg is None:
            return
        self._ladder_running = True
        if self.eof_at is not None and start == "cancel":
            start = "sigterm"  # it cannot read a cancel it will never answer
        self._tg.start_soon(self._climb, start, reason)

    async def _climb(self, start: RungAction, reason: str) -> None:
        target = LadderTarget(
            request_exit=self._send_cancel,
            signal_group=self._signal_group,
            kill_cgroup=self._kill_cgroup,
            wait_exited=self._exited.wait,
        )
        await climb(target, plan(self.ladder, start=start), reason, self._reached)

    def _reached(self, rung: RungAction) -> None:
        self.top_rung = rung
        self._on_rung(rung)

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

    # ---- writing -----------------------------------------------------------------------------

    async def send(self, message: BaseModel, *, reveal: bool = False) -> bool:
        """Write one frame within `WRITE_TIMEOUT_S`; False when the process is gone or not reading."""
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
                    self._dispatch(line)
                if splitter.discarding:
                    # A line past the cap: flooding or broken. Stop reading it; kill the process.
                    self.faults = self.liveness.max_faults
                    self._stop_within("faulty", "sigterm", f"{self.channel} frame over the 16 MiB cap")
                    return
                if not chunk:
                    self.eof_at = anyio.current_time()
                    return
        finally:
            self._stdout_done.set()

    def _dispatch(self, line: bytes | Oversize) -> None:
        message = decode(line, self.up_adapter)
        if isinstance(message, FrameError):
            self.faults += 1
            self._tell_stderr(f"[agentd] bad {self.channel} frame: {message.kind}: {message.detail}")
        elif isinstance(message, jsonrpc.Response):
            self._on_pong(message)
        elif isinstance(message, jsonrpc.ErrorResponse):
            self.faults += 1  # it answers only our pings, and those never fail
        elif isinstance(message, control.Ready):
            self.ready = True
            self._on_ready()
        else:
            self._on_frame(message)

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

    async def _relay_stderr(self) -> None:
        await relay_stderr(self.proc.stderr_fd, self.stderr_line_cap, self._on_stderr)

    def _on_stderr(self, line: str) -> None:
        self._tell_stderr(line)

    # ---- liveness ----------------------------------------------------------------------------

    @property
    def tick_s(self) -> float:
        """How often its liveness is checked."""
        return min(self.liveness.ping_interval_s, MAX_TICK_S)

    def watch_alone(self) -> None:
        """The shared clock stopped: check this process from a task of its own from now on."""
        if self._tg is not None and not self.exited:
            self._tg.start_soon(self._watch)

    async def _watch(self) -> None:
        while not self.exited:
            self.check_liveness(anyio.current_time())
            await anyio.sleep(max(0.0, self.next_check_at - anyio.current_time()))

    def check_liveness(self, now: float) -> None:
        """One check: a ping when due (and the policy allows it), then the detectors."""
        if self.exited or self._tg is None:
            return
        pinging = self._pinging(now) and self.ready and ping_due(now, self._next_ping) and self.eof_at is None
        if not self._ladder_running:
            # Looked at before this check's ping goes out: the ping wakes the child's control
            # thread, which a look just after would find queued for a CPU, as if starved.
            self._look_at_silence(now, pinging=pinging)
        if pinging:
            self._ping_seq += 1
            self._ping_sent[self._ping_seq] = now
            self.outstanding_pings = len(self._ping_sent)
            self._ping(self._ping_seq)
            self._next_ping = next_ping_at(self._next_ping, now, self.liveness.ping_interval_s)
        self.next_check_at = next_check_time(now, self.tick_s, self._next_ping)
        verdict = classify(self.observation(), self.liveness, now)
        if verdict != "ok" and not self._ladder_running:
            self._on_verdict(verdict)

    def _look_at_silence(self, now: float, *, pinging: bool) -> None:
        """While it is overdue (not ready in time, its pongs missed, its loop reported stopped;
        `pinging`: counting the ping this check is about to send), read what the scheduler says of
        it (only then: a read of /proc per check would cost every child), so `classify` can tell
        starved from stuck."""
        observation = self.observation()
        if pinging:
            observation = replace(observation, outstanding_pings=observation.outstanding_pings + 1)
        late = overdue(observation, self.liveness, now)
        if late is None or self.liveness.starved_grace_s <= 0:
            self.silence = None
            self._starved_told = False
            return
        self.silence = observe_silence(
            self.silence, read_sched_facts(self.pid), now, self.liveness.starvation
        )
        if self.silence.judgement == "starved" and not self._starved_told:
            self._starved_told = True
            self._on_starved(self.silence, late)

    def send_nowait(self, message: BaseModel) -> bool:
        """Write `message` now when no other frame is being written: a frame of at most PIPE_BUF
        bytes goes into a pipe whole or not at all, so it cannot interleave with another. False
        (a frame mid-write, a full pipe, a larger frame): the caller sends it with `send`. A
        channel that fails the write is stopped, and the frame counts as handled."""
        data = encode(message)
        if self._write_lock.locked() or len(data) > select.PIPE_BUF:
            return False
        try:
            if os.write(self.proc.stdin_fd, data) == len(data):
                return True
        except BlockingIOError:
            return False  # the pipe is full
        except OSError:
            self._stop_within("stuck", "sigterm", f"{self.channel} channel not writable")
            return True
        # Not a pipe after all: a frame's start is out, and its rest would race others.
        self._stop_within("faulty", "sigterm", f"{self.channel} channel took part of a frame")
        return True

    def _ping(self, seq: int) -> None:
        """Write the ping now if it can go at once, else a task sends it. A task per ping cost the
        loop a task's start and stamped the round trip before the write (the ping p99 with 100
        children)."""
        ping = control.Ping(id=seq, params=control.PingParams(seq=seq))
        if not self.send_nowait(ping):
            assert self._tg is not None
            self._tg.start_soon(self._send_ping, ping)

    async def _send_ping(self, ping: control.Ping) -> None:
        if not await self.send(ping):
            self._stop_within("stuck", "sigterm", f"{self.channel} channel not writable")
