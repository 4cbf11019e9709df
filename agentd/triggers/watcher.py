"""One supervised resource watcher process: its watch channel, liveness and kill ladder
(docs/design.md §2, §11).

`WatcherProcess.run` owns a watcher from the `ctrl/watch` frame to its reaped exit status, like
`SupervisedChild` owns a subagent: frames are read with the 16 MiB line cap (a longer line is a
fatal protocol fault), writes have a deadline, `ctrl/ping` is sent on the liveness interval and
the detectors of `agentd.supervision.liveness` decide when it is stuck, stderr is re-emitted with
a size cap, the kill ladder stops it, and it is reaped through its pidfd. A watcher has no
deadline: it lives until it is stopped, says `unsupported` (exit 0), or loses its session.
"""

from __future__ import annotations

import contextlib
import math
import os
import signal
from typing import Protocol

import anyio
import anyio.abc
from pydantic import BaseModel

from agentd.spawning.spawner import SpawnedProcess
from agentd.supervision.child_pipes import reap, relay_stderr, write_all
from agentd.supervision.liveness import ExitInfo, LivenessPolicy, Observation, classify
from processes.climb import LadderTarget, climb
from processes.ladder import LadderPolicy, RungAction, plan
from processes.linux import signal_pidfd
from processes.pipes import read_chunk
from protocol import control, jsonrpc
from protocol.framing import MAX_FRAME, FrameError, LineSplitter, Oversize, decode, encode
from protocol.spawn import REVEAL_SECRETS
from protocol.watch import (
    WATCH_UP_ADAPTER,
    CatalogueReport,
    ResourceChanged,
    Watch,
    WatchPayload,
    WatchState,
)

WRITE_TIMEOUT_S = 5.0
DRAIN_AFTER_EXIT_S = 1.0


class WatcherListener(Protocol):
    """What a `WatcherProcess` reports to its owner (all called on the event loop)."""

    def on_state(self, watcher: WatcherProcess, frame: WatchState) -> None: ...
    def on_resource(self, watcher: WatcherProcess, frame: ResourceChanged) -> None: ...
    def on_catalogue(self, watcher: WatcherProcess, frame: CatalogueReport) -> None: ...
    def on_event(self, watcher: WatcherProcess, params: control.EventParams) -> None: ...
    def on_stderr(self, watcher: WatcherProcess, line: str) -> None: ...
    def on_stuck(self, watcher: WatcherProcess, verdict: str) -> None: ...


class WatcherProcess:
    def __init__(
        self,
        proc: SpawnedProcess,
        server: str,
        listener: WatcherListener,
        *,
        liveness: LivenessPolicy,
        ladder: LadderPolicy,
        stderr_line_cap: int = 8192,
    ) -> None:
        self.proc = proc
        self.server = server
        self.listener = listener
        self.liveness = liveness
        self.ladder = ladder
        self.stderr_line_cap = stderr_line_cap
        self.spawned_at = anyio.current_time()
        self.ready = False
        self.faults = 0
        self.eof_at: float | None = None
        self.last_loop_age_ms: int | None = None
        self.exit_info: ExitInfo | None = None
        self.stopped_by_us = False
        self.stop_reason: str | None = None
        # The liveness verdict that made us stop it (unresponsive, not_ready, ...), if one did.
        self.stuck_verdict: str | None = None
        self._ping_seq = 0
        self._ping_sent: dict[int, float] = {}
        self._write_lock = anyio.Lock()
        self._exited = anyio.Event()
        self._stdout_done = anyio.Event()
        self._tg: anyio.abc.TaskGroup | None = None
        self._ladder_running = False
        self._pending_stop: str | None = None

    @property
    def pid(self) -> int:
        return self.proc.pid

    @property
    def exited(self) -> bool:
        return self._exited.is_set()

    def observation(self) -> Observation:
        return Observation(
            spawned_at=self.spawned_at,
            deadline=math.inf,
            ready=self.ready,
            outstanding_pings=len(self._ping_sent),
            last_loop_age_ms=self.last_loop_age_ms,
            eof_at=self.eof_at,
            faults=self.faults,
        )

    async def run(self, payload: WatchPayload) -> ExitInfo:
        """Supervise the watcher to its reaped exit; return how it ended."""
        try:
            async with anyio.create_task_group() as tg:
                self._tg = tg
                tg.start_soon(self._read_frames)
                tg.start_soon(self._relay_stderr)
                tg.start_soon(self._watch)
                if self._pending_stop is not None:
                    # Stopped before it got its assignment: it reads no cancel yet, so SIGTERM.
                    self._start_ladder("sigterm", self._pending_stop)
                elif not await self.send(Watch(params=payload), reveal=True):
                    self.faults = self.liveness.max_faults
                    self._start_ladder("sigterm", "the watch channel is not writable")
                await self._wait_exit()
                with anyio.move_on_after(DRAIN_AFTER_EXIT_S):
                    await self._stdout_done.wait()
                tg.cancel_scope.cancel()
        finally:
            if not self.exited:
                # Left early (cancelled, or our own error): the watcher must not outlive us.
                self._signal_group(signal.SIGKILL)
                with anyio.CancelScope(shield=True), anyio.move_on_after(self.ladder.kill_reap_s):
                    await self._wait_exit()
            self.proc.close_fds()
        assert self.exit_info is not None
        return self.exit_info

    def stop(self, reason: str, *, force: bool = False) -> None:
        """Stop it (the daemon drains, the trigger went away, an operator restarts it): the kill
        ladder from `ctrl/cancel` (from SIGKILL with `force`)."""
        self.stopped_by_us = True
        self.stop_reason = self.stop_reason or reason
        if self.exited:
            return
        if self._tg is None:
            self._pending_stop = reason
            return
        if force and self._ladder_running:
            self._signal_group(signal.SIGKILL)
            return
        start: RungAction = "sigkill" if force else ("cancel" if self.eof_at is None else "sigterm")
        self._start_ladder(start, reason)

    def _start_ladder(self, start: RungAction, reason: str) -> None:
        if self._ladder_running or self._tg is None:
            return
        self._ladder_running = True
        target = LadderTarget(
            request_exit=self._send_cancel,
            signal_group=self._signal_group,
            wait_exited=self._exited.wait,
        )
        self._tg.start_soon(climb, target, plan(self.ladder, start=start), reason)

    async def _send_cancel(self, reason: str) -> None:
        await self.send(control.Cancel(params=control.CancelParams(reason=reason[:1000])))

    def _signal_group(self, sig: int) -> None:
        if self.exited:
            return  # never signal after reaping: the pid may belong to someone else now
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(self.proc.pid, sig)
        with contextlib.suppress(OSError):
            signal_pidfd(self.proc.pidfd, sig)

    async def _wait_exit(self) -> None:
        self.exit_info = await reap(self.proc.pidfd)
        self._exited.set()

    async def send(self, message: BaseModel, *, reveal: bool = False) -> bool:
        """Write one frame within `WRITE_TIMEOUT_S`; False when the watcher is gone or not reading."""
        data = encode(message, context=REVEAL_SECRETS if reveal else None)
        async with self._write_lock:
            return await write_all(self.proc.stdin_fd, data, WRITE_TIMEOUT_S)

    async def _read_frames(self) -> None:
        splitter = LineSplitter(MAX_FRAME)
        try:
            while True:
                chunk = await read_chunk(self.proc.stdout_fd)
                for line in splitter.feed(chunk) if chunk else splitter.close():
                    self._dispatch(line)
                if splitter.discarding:
                    self.faults = self.liveness.max_faults
                    self._start_ladder("sigterm", "watch frame over the 16 MiB cap")
                    return
                if not chunk:
                    self.eof_at = anyio.current_time()
                    return
        finally:
            self._stdout_done.set()

    def _dispatch(self, line: bytes | Oversize) -> None:
        message = decode(line, WATCH_UP_ADAPTER)
        if isinstance(message, FrameError):
            self.faults += 1
            self.listener.on_stderr(self, f"[agentd] bad watch frame: {message.kind}: {message.detail}")
        elif isinstance(message, jsonrpc.Response):
            self._on_pong(message)
        elif isinstance(message, control.Ready):
            self.ready = True
        elif isinstance(message, WatchState):
            self.listener.on_state(self, message)
        elif isinstance(message, ResourceChanged):
            self.listener.on_resource(self, message)
        elif isinstance(message, CatalogueReport):
            self.listener.on_catalogue(self, message)
        elif isinstance(message, control.Event):
            self.listener.on_event(self, message.params)
        else:  # an error response: the watcher answers no requests of ours but pings
            self.faults += 1

    def _on_pong(self, message: jsonrpc.Response) -> None:
        try:
            pong = control.PingResult.model_validate(message.result)
        except ValueError:
            self.faults += 1
            return
        self._ping_sent = {k: v for k, v in self._ping_sent.items() if k > pong.seq}
        self.last_loop_age_ms = pong.loop_age_ms

    async def _relay_stderr(self) -> None:
        await relay_stderr(
            self.proc.stderr_fd, self.stderr_line_cap, lambda line: self.listener.on_stderr(self, line)
        )

    async def _watch(self) -> None:
        interval = self.liveness.ping_interval_s
        tick = min(interval, 1.0)
        next_ping = anyio.current_time() + interval
        while not self.exited:
            now = anyio.current_time()
            if self.ready and now >= next_ping and self.eof_at is None and not self._ladder_running:
                self._ping_seq += 1
                self._ping_sent[self._ping_seq] = now
                ping = control.Ping(id=self._ping_seq, params=control.PingParams(seq=self._ping_seq))
                if not await self.send(ping):
                    self._start_ladder("sigterm", "watch channel not writable")
                next_ping = now + interval
            verdict = classify(self.observation(), self.liveness, anyio.current_time())
            if verdict != "ok" and not self._ladder_running:
                self.stuck_verdict = verdict
                self.listener.on_stuck(self, verdict)
                self._start_ladder("sigterm", verdict)
            await anyio.sleep(tick)
