"""Task supervision: the queue, the spawn chokepoint, outcomes, drain and restart recovery.

The `Supervisor` takes queued tasks from the journal up to `max_concurrent_tasks`, spawns each
as a `SupervisedChild` in write-ahead order (mark `starting` → spawn → record pid and start time →
send `ctrl/spawn`), records exactly one terminal status per task, and sweeps orphans. It never
talks to a model and never parses MCP traffic (DESIGN §1).
"""

from __future__ import annotations

import contextlib
import os
import signal
import time
from collections.abc import Callable
from dataclasses import dataclass, field

import anyio
import psutil
from pydantic import JsonValue

from agentd import logs, reaper
from agentd.cgroup import CgroupRoot
from agentd.child import ChildIdentity, SupervisedChild, SupRequest
from agentd.errors import AgentdError, JournalError, SpawnError
from agentd.journal import Journal
from agentd.journal_records import TaskRecord
from agentd.ladder import LadderPolicy, RungAction
from agentd.liveness import KillCause, LivenessPolicy, Verdict
from agentd.spawner import MARKER_ENV, RLimits, Spawner, SpawnRequest
from protocol import control
from protocol.events import EventName
from protocol.result import RunError, RunResult, TerminalStatus, exit_code
from protocol.spawn import SpawnPayload

PayloadBuilder = Callable[[TaskRecord], SpawnPayload]
FIELD_CAP = 2000


class PayloadError(AgentdError):
    """A queued task can no longer be built into a spawn payload (e.g. the config changed)."""


@dataclass(frozen=True, slots=True)
class SupervisorOptions:
    max_concurrent_tasks: int = 8
    liveness: LivenessPolicy = field(default_factory=LivenessPolicy)
    ladder: LadderPolicy = field(default_factory=LadderPolicy)
    rlimits: RLimits = field(default_factory=RLimits)
    memory_max: int | None = None
    pids_max: int | None = None
    drain_timeout_s: float = 25.0
    teardown_grace_s: float = 10.0
    orphan_sweep_interval_s: float = 10.0
    child_argv: tuple[str, ...] | None = None


@dataclass
class _Run:
    record: TaskRecord
    child: SupervisedChild | None = None
    cancel_reason: str | None = None
    node_usage: dict[str, int] = field(default_factory=lambda: {"tokens_in": 0, "tokens_out": 0, "steps": 0})


def _comp(event: str) -> str:
    if event.startswith("intel."):
        return "intel"
    if event.startswith(("tool.", "mcp.")):
        return "mcp"
    return "agent"


def _capped(fields: dict[str, JsonValue]) -> dict[str, JsonValue]:
    return {k: (v[:FIELD_CAP] if isinstance(v, str) else v) for k, v in fields.items()}


class _RunListener:
    """The `ChildListener` of one task's root child: journal, logs and accounting."""

    def __init__(self, sup: Supervisor, run: _Run) -> None:
        self.sup = sup
        self.run = run
        rec = run.record
        self.log = logs.get(task_id=rec.task_id, run_id=rec.run_id, handle="0")

    def _journal(self, event: EventName, fields: dict[str, JsonValue]) -> None:
        self.sup.journal.append_event(self.run.record.task_id, event, fields)

    def on_ready(self, child: SupervisedChild) -> None:
        ready_ms = int((anyio.current_time() - child.spawned_at) * 1000)
        self.log.info("subagent.ready", pid=child.pid, dur_ms=ready_ms)
        self._journal("subagent.ready", {"handle": "0", "pid": child.pid, "dur_ms": ready_ms})

    def on_event(self, child: SupervisedChild, params: control.EventParams) -> None:
        fields = _capped(params.fields)
        level = (
            "info" if params.event in ("loop.start", "loop.final", "loop.error", "mcp.connect") else "debug"
        )
        getattr(self.log, level)(params.event, pid=child.pid, comp=_comp(params.event), **fields)
        self._journal(params.event, {"handle": "0", **fields})

    def on_usage(self, child: SupervisedChild, params: control.UsageParams) -> None:
        usage = self.run.node_usage
        usage["tokens_in"] += params.tokens_in
        usage["tokens_out"] += params.tokens_out
        usage["steps"] += params.steps

    def on_result(self, child: SupervisedChild, result: RunResult) -> None:
        self.log.info("subagent.exit", pid=child.pid, status=result.status.value, phase="result")

    def on_stderr(self, child: SupervisedChild, line: str) -> None:
        self.log.info("log.stderr", pid=child.pid, line=line)

    def on_verdict(self, child: SupervisedChild, verdict: Verdict) -> None:
        self.log.warning("subagent.stuck", pid=child.pid, verdict=verdict)
        self._journal("subagent.stuck", {"handle": "0", "verdict": verdict})

    def on_rung(self, child: SupervisedChild, rung: RungAction, cause: KillCause) -> None:
        self.log.warning("subagent.signal", pid=child.pid, rung=rung, cause=cause)
        self._journal("subagent.signal", {"handle": "0", "rung": rung, "cause": cause})

    async def on_request(self, child: SupervisedChild, request: SupRequest) -> JsonValue:
        return {"refused": "nested subagents are not available in this build"}


class Supervisor:
    def __init__(
        self,
        journal: Journal,
        build_payload: PayloadBuilder,
        spawner: Spawner,
        options: SupervisorOptions | None = None,
        cgroup_root: CgroupRoot | None = None,
    ) -> None:
        self.journal = journal
        self.build_payload = build_payload
        self.spawner = spawner
        self.options = options or SupervisorOptions()
        self.cgroup_root = cgroup_root
        self.log = logs.get()
        self.draining = False
        self.running: dict[str, _Run] = {}
        self._wake = anyio.Event()
        self._terminal: dict[str, anyio.Event] = {}
        self._drained = anyio.Event()
        self._force = False

    # ---- public --------------------------------------------------------------------------------

    def owned_pids(self) -> set[int]:
        return {r.child.pid for r in self.running.values() if r.child is not None and not r.child.exited}

    def notify_submitted(self) -> None:
        self._wake.set()

    def terminal_event(self, task_id: str) -> anyio.Event:
        """An event set when `task_id` reaches a terminal state in this daemon's lifetime."""
        return self._terminal.setdefault(task_id, anyio.Event())

    async def cancel(self, task_id: str, reason: str) -> TaskRecord | None:
        """Cancel a task in any state; returns the record as it stands (None if unknown)."""
        run = self.running.get(task_id)
        if run is not None:
            run.cancel_reason = run.cancel_reason or reason
            if run.child is not None:
                run.child.stop("cancel", reason=reason)
            return await self.journal.get(task_id)
        record = await self.journal.get(task_id)
        if record is None or record.state != "queued":
            return record
        result = RunResult(status=TerminalStatus.CANCELLED, error=RunError(kind="cancelled", message=reason))
        record = await self._record_terminal(record, result)
        return record

    def drain(self, *, force: bool = False) -> None:
        """Stop intake and cancel every running task; `force` SIGKILLs them now (second signal)."""
        first = not self.draining
        self.draining = True
        self._force = self._force or force
        if first:
            self.log.info("proc.drain", running=len(self.running))
        for run in self.running.values():
            if run.child is not None:
                run.child.stop(
                    "drain", start="sigkill" if force else "cancel", reason="agentd is shutting down"
                )
            else:
                run.cancel_reason = run.cancel_reason or "agentd is shutting down"
        self._wake.set()

    async def wait_drained(self) -> None:
        await self._drained.wait()

    def counts(self) -> dict[str, int]:
        return {"running": len(self.running)}

    # ---- the scheduler --------------------------------------------------------------------------

    async def serve(self) -> None:
        """Run tasks until drained: start queued ones as slots free up; sweep orphans."""
        async with anyio.create_task_group() as tg:
            tg.start_soon(self._sweep_forever)
            while not self.draining:
                free = self.options.max_concurrent_tasks - len(self.running)
                if free > 0:
                    try:
                        queued = await self.journal.next_queued(free + len(self.running))
                    except JournalError as exc:
                        self.log.error("proc.start", err=f"journal read failed: {exc}")
                        queued = ()
                    for record in queued:
                        if (
                            record.task_id in self.running
                            or len(self.running) >= self.options.max_concurrent_tasks
                        ):
                            continue
                        run = _Run(record)
                        self.running[record.task_id] = run
                        tg.start_soon(self._run_task, run)
                self._wake = anyio.Event()
                with anyio.move_on_after(1.0):
                    await self._wake.wait()
            await self._finish_drain()
            tg.cancel_scope.cancel()
        self._drained.set()

    async def _finish_drain(self) -> None:
        deadline = anyio.current_time() + self.options.drain_timeout_s
        while self.running and anyio.current_time() < deadline - 2.5:
            with anyio.move_on_at(deadline - 2.5):
                await self._wake.wait()
            self._wake = anyio.Event()
        if self.running:
            self.drain(force=True)
            with anyio.move_on_at(deadline):
                while self.running:
                    await self._wake.wait()
                    self._wake = anyio.Event()

    async def _sweep_forever(self) -> None:
        while True:
            await anyio.sleep(self.options.orphan_sweep_interval_s)
            self.sweep()

    def sweep(self) -> list[int]:
        return reaper.sweep(self.owned_pids(), on_kill=reaper.log_orphan)

    # ---- one task ------------------------------------------------------------------------------

    async def _run_task(self, run: _Run) -> None:
        record = run.record
        try:
            result = await self._start_and_supervise(run)
            if result is not None:
                await self._record_terminal(record, result, clean_drain=self.draining)
        except JournalError as exc:
            # The outcome could not be recorded; restart recovery will reconcile the task.
            self.log.error("task.terminal", task_id=record.task_id, err=f"journal: {exc}")
        finally:
            self.running.pop(record.task_id, None)
            self._wake.set()
            self.sweep()

    async def _start_and_supervise(self, run: _Run) -> RunResult | None:
        record = run.record
        log = self.log.bind(task_id=record.task_id, run_id=record.run_id, handle="0")
        try:
            payload = self.build_payload(record)
        except PayloadError as exc:
            return RunResult(status=TerminalStatus.CRASHED, error=RunError(kind="config", message=str(exc)))
        if run.cancel_reason is not None:
            return RunResult(
                status=TerminalStatus.CANCELLED, error=RunError(kind="cancelled", message=run.cancel_reason)
            )
        run.record = await self.journal.mark_starting(record.task_id)
        leaf = None
        if self.cgroup_root is not None:
            leaf = self.cgroup_root.create_leaf(
                f"{record.task_id}-0", memory_max=self.options.memory_max, pids_max=self.options.pids_max
            )
        request = SpawnRequest(
            task_id=record.task_id,
            run_id=record.run_id,
            handle="0",
            rlimits=self.options.rlimits,
            cgroup=str(leaf.path) if leaf else None,
            argv=self.options.child_argv,
        )
        try:
            proc = self.spawner.spawn(request)
        except SpawnError as exc:
            log.error("subagent.spawn", err=str(exc))
            return RunResult(status=TerminalStatus.CRASHED, error=RunError(kind="spawn", message=str(exc)))
        deadline = anyio.current_time() + payload.limits.deadline_s
        child = SupervisedChild(
            proc,
            ChildIdentity(record.task_id, record.run_id, "0"),
            _RunListener(self, run),
            deadline=deadline,
            liveness=self.options.liveness,
            ladder=self.options.ladder,
            cgroup=leaf,
            teardown_grace_s=self.options.teardown_grace_s,
        )
        run.child = child
        log.info("subagent.spawn", pid=proc.pid)
        try:
            run.record = await self.journal.mark_running(record.task_id, proc.pid, proc.start_time)
            await self.journal.upsert_node(
                record.task_id,
                "0",
                parent=None,
                depth=0,
                state="running",
                pid=proc.pid,
                pid_start_time=proc.start_time,
                grant_steps=payload.limits.max_steps,
                grant_tokens=payload.limits.max_tokens,
            )
        except JournalError:
            # It must not run unrecorded: kill and reap it before reporting the failure.
            child.stop("faulty", start="sigkill")
            with anyio.CancelScope(shield=True):
                await child.run(payload)
            raise
        if run.cancel_reason is not None or self.draining:
            child.stop(
                "drain" if self.draining else "cancel",
                start="sigkill" if self._force else "cancel",
                reason=run.cancel_reason or "agentd is shutting down",
            )
        self.log.info(
            "task.started",
            task_id=record.task_id,
            run_id=record.run_id,
            pid=proc.pid,
            attempt=record.attempts + 1,
        )
        result = await child.run(payload)
        exit_desc = child.exit_info.describe if child.exit_info else "unknown"
        log.info("subagent.exit", pid=proc.pid, status=result.status.value, exit=exit_desc)
        self.journal.append_event(
            record.task_id,
            "subagent.exit",
            {"handle": "0", "pid": proc.pid, "exit": exit_desc, "status": result.status.value},
        )
        await self.journal.end_node(record.task_id, "0", result.status, result.usage)
        return result

    async def _record_terminal(
        self, record: TaskRecord, result: RunResult, *, clean_drain: bool = False
    ) -> TaskRecord:
        code = int(exit_code(result, clean_drain=clean_drain))
        record = await self.journal.mark_terminal(
            record.task_id,
            result.status,
            exit_code=code,
            result=result.result,
            partial=result.partial,
            usage=result.usage,
            abort=result.abort,
            error=result.error,
        )
        self.log.info(
            "task.terminal",
            task_id=record.task_id,
            run_id=record.run_id,
            status=result.status.value,
            exit_code=code,
            steps=result.usage.steps,
            tokens=result.usage.tokens,
            err=result.error.kind if result.error else None,
        )
        self.terminal_event(record.task_id).set()
        return record

    # ---- restart recovery (DESIGN §8) -----------------------------------------------------------

    async def recover(self) -> list[str]:
        """Reconcile tasks a previous daemon left `starting`/`running`; returns their ids.

        A survivor matching pid + start time + env marker is killed (with its process group);
        the task is requeued with the same run id if its retry policy allows, else `crashed`.
        """
        handled: list[str] = []
        for record in await self.journal.unfinished():
            killed = await anyio.to_thread.run_sync(kill_survivor, record)
            if record.may_requeue:
                await self.journal.requeue(record.task_id)
                outcome = "requeued"
            else:
                result = RunResult(
                    status=TerminalStatus.CRASHED,
                    usage=record.usage,
                    error=RunError(
                        kind="supervisor_restart", message="the supervisor restarted while this task ran"
                    ),
                )
                await self._record_terminal(record, result)
                outcome = "crashed"
            self.log.warning(
                "subagent.restart",
                task_id=record.task_id,
                run_id=record.run_id,
                outcome=outcome,
                survivor_killed=killed,
                attempts=record.attempts,
            )
            handled.append(record.task_id)
        return handled


def kill_survivor(record: TaskRecord, *, timeout_s: float = 5.0) -> bool:
    """Kill the process a previous daemon ran for `record`, if it still exists and is really it.

    It is identified by pid, start time and the env marker, so a recycled pid is never signalled.
    It is not our child (it was reparented when its daemon died), so it cannot be reaped here:
    it is gone once it has vanished or become a zombie.
    """
    if record.pid is None or record.pid_start_time is None:
        return False
    try:
        proc = psutil.Process(record.pid)
        if abs(proc.create_time() - record.pid_start_time) > 0.05:
            return False
        if not proc.environ().get(MARKER_ENV, "").startswith(record.run_id + "/"):
            return False
    except psutil.Error:
        return False
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(record.pid, signal.SIGKILL)
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.kill(record.pid, signal.SIGKILL)
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        try:
            if proc.status() == psutil.STATUS_ZOMBIE:
                break
        except psutil.NoSuchProcess:
            break
        time.sleep(0.01)
    return True
