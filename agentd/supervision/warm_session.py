"""One warm session (route = "continue"; docs/warm-sessions.md): a long-lived subagent that takes
one turn per delivery, supervised like any task's root, restarted fresh when it crashes.

Each incarnation is one journaled task, run by a `TaskRun` (so spawn, liveness, the kill ladder,
usage accounting and teardown are the task machinery's), created already `starting` so the
scheduler never takes it. Deliveries are injected one at a time; those arriving during a turn
wait, coalesced per URI, and are injected after it. The decisions live in `warm_policy`.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Literal, Protocol

import anyio
import anyio.abc
from pydantic import JsonValue

from agentd import logs
from agentd.errors import JournalError
from agentd.journal.records import TaskRecord
from agentd.supervision import warm_policy
from agentd.supervision.ports import RunJournal, RunPorts, RunTasks
from agentd.supervision.task_run import TaskRun
from agentd.supervision.warm_policy import Delivery, ExitDecision, Pending, TurnOutcome
from protocol import control
from protocol.api import TaskSpec
from protocol.result import AbortKind, RunError, RunResult, RunUsage, TerminalStatus, exit_code
from protocol.spawn import SpawnPayload

SessionState = Literal["starting", "idle", "busy", "restarting", "dormant", "ended"]


class SessionTasks(RunTasks, Protocol):
    """The task writes a warm session adds to a task run's: its own tasks' creation and end."""

    async def submit_claimed(
        self,
        spec: TaskSpec,
        owner_uid: int,
        *,
        grant_steps: int | None = None,
        grant_tokens: int | None = None,
        trigger: str | None = None,
    ) -> TaskRecord: ...

    async def mark_terminal(
        self,
        task_id: str,
        status: TerminalStatus,
        *,
        exit_code: int | None = None,
        result: JsonValue = None,
        partial: bool = False,
        usage: RunUsage | None = None,
        abort: AbortKind | None = None,
        error: RunError | None = None,
        only_queued: bool = False,
        idle: bool = False,
    ) -> TaskRecord: ...


class SessionJournal(RunJournal, Protocol):
    """A task run's journal whose tasks a warm session also creates and ends."""

    @property
    def tasks(self) -> SessionTasks: ...


@dataclass(frozen=True, slots=True)
class Restart:
    """Asked of the owner's restart policy before a fresh incarnation starts.

    `cause`: `crashed` (the last one crashed or wedged: back off as the governor says) or
    `resumed` (it ended cleanly and a delivery is waiting). `restarts`: crash restarts in a row
    (reset by an answered turn). `last`: how the previous incarnation ended.
    """

    cause: Literal["crashed", "resumed"]
    restarts: int
    last: RunResult


RestartPolicy = Callable[[Restart], Awaitable[bool]]
"""Wait as long as the policy wants (backoff), then True to start a fresh incarnation, False to
give up (the session ends; its waiting deliveries come back unanswered)."""


class TaskRegistry(Protocol):
    """Where the session's tasks are made known (the `Supervisor`): `agentd cancel` and a drain
    reach them, and the orphan sweep spares their processes."""

    def adopt(self, task_id: str, cancel: Callable[[str], None], pids: Callable[[], set[int]]) -> None: ...
    def release(self, task_id: str) -> None: ...


class SessionListener(Protocol):
    """What a warm session reports to its owner (called on the event loop; must not raise)."""

    def on_turn(self, session: WarmSession, outcome: TurnOutcome) -> None: ...
    def on_exit(
        self, session: WarmSession, record: TaskRecord, result: RunResult, decision: ExitDecision
    ) -> None: ...


class _Quiet:
    def on_turn(self, session: WarmSession, outcome: TurnOutcome) -> None:
        return None

    def on_exit(
        self, session: WarmSession, record: TaskRecord, result: RunResult, decision: ExitDecision
    ) -> None:
        return None


class Ticket:
    """One delivery handed to the session: `done` is set once `outcome` is known."""

    __slots__ = ("delivery", "done", "outcome")

    def __init__(self, delivery: Delivery) -> None:
        self.delivery = delivery
        self.done = anyio.Event()
        self.outcome: TurnOutcome | None = None

    async def wait(self) -> TurnOutcome:
        await self.done.wait()
        assert self.outcome is not None
        return self.outcome


class WarmSession:
    """A warm session for one trigger. Run `run` in a task group (`await tg.start(session.run)`),
    then `inject` deliveries; `stop` ends it.

    Args:
        ports: the task machinery's ports (spawner, options, drain state, metrics).
        journal: the journal (also `ports.journal`), with the session's own writes.
        spec: the journaled spec of each incarnation's task (instruction, model, mcp, labels).
        owner_uid: the uid the tasks run as (the daemon's, for a configured trigger).
        payload: the warm spawn payload (`warm=True`); task and run ids are replaced per incarnation.
        restart: the owner's restart policy (the trigger governor).
        listener: told of every turn and every incarnation's exit.
        registry: the supervisor, which then cancels (`agentd cancel`, drain) and sweeps with it.
        build: each incarnation's payload from its journaled task (the daemon builds it from the
            configuration then in force); default: `payload` with the task's ids.
        trigger: the trigger whose session this is, journaled on each incarnation's task.
    """

    def __init__(
        self,
        ports: RunPorts,
        journal: SessionJournal,
        spec: TaskSpec,
        owner_uid: int,
        payload: SpawnPayload,
        *,
        restart: RestartPolicy,
        listener: SessionListener | None = None,
        registry: TaskRegistry | None = None,
        name: str = "warm",
        build: Callable[[TaskRecord], SpawnPayload] | None = None,
        trigger: str | None = None,
    ) -> None:
        if not payload.warm:
            raise ValueError("a warm session needs a warm payload")
        self.ports = ports
        self.journal = journal
        self.spec = spec
        self.owner_uid = owner_uid
        self.payload = payload
        self.name = name
        self.trigger = trigger
        self._build = build
        self.state: SessionState = "starting"
        self.record: TaskRecord | None = None
        self.turns = 0
        self._restart = restart
        self._listener: SessionListener = listener or _Quiet()
        self.registry = registry
        self._queue: tuple[Pending, ...] = ()
        self._waiters: dict[int, list[Ticket]] = {}
        self._slots = 0
        self._seq = 0
        self._in_flight: Pending | None = None
        self._arrived = anyio.Event()
        self._turn: tuple[int, anyio.Event, list[control.TurnParams]] | None = None
        self._run: TaskRun | None = None
        self._stopping: str | None = None
        self._wedged = False
        self._ended = anyio.Event()
        self.log = logs.get(trigger=name)

    # ---- the owner's interface -------------------------------------------------------------

    async def inject(self, delivery: Delivery) -> TurnOutcome:
        """Deliver one change and wait for the turn that answers it (or a reason none will).

        Every path that resolves the wait is bounded: a turn by its deadline plus
        `warm_policy.TURN_REPORT_SLACK_S`, a restart by the owner's policy, the end by the ladder.
        """
        return await self.inject_nowait(delivery).wait()

    def inject_nowait(self, delivery: Delivery) -> Ticket:
        """Queue one change without waiting; its outcome reaches the listener's `on_turn`."""
        waiter = Ticket(delivery)
        if self.state == "ended":
            waiter.outcome = TurnOutcome(delivery, None, error="the warm session has ended")
            waiter.done.set()
            return waiter
        self._slots += 1
        self._queue, pending = warm_policy.offer(self._queue, delivery, self._slots)
        self._waiters.setdefault(pending.slot, []).append(waiter)
        self._arrived.set()
        return waiter

    def stop(self, reason: str = "the warm session was stopped", *, force: bool = False) -> None:
        """End the session: its child is cancelled (the ladder, `force`: SIGKILL at once)."""
        self._stopping = self._stopping or reason
        self._arrived.set()
        if self._run is not None:
            self._run.cancel(reason, force=force)

    async def wait_ended(self) -> None:
        await self._ended.wait()

    def pids(self) -> set[int]:
        """The session's live processes (the supervisor's orphan sweep must know them)."""
        return self._run.pids() if self._run is not None else set()

    @property
    def queued(self) -> int:
        return len(self._queue)

    # ---- the session's life ----------------------------------------------------------------

    async def run(
        self, *, task_status: anyio.abc.TaskStatus[None] = anyio.TASK_STATUS_IGNORED
    ) -> RunResult | None:
        """Run incarnations until the session ends; returns the last one's result."""
        task_status.started()
        last: RunResult | None = None
        restarts = 0
        try:
            while self._stopping is None:
                turns_before = self.turns
                try:
                    record = await self._new_task()
                except JournalError as exc:
                    # Nothing may run unrecorded: the session ends, its deliveries unanswered.
                    self.log.error("task.terminal", err=f"journal: {exc}", warm=True)
                    break
                last = await self._incarnation(record)
                decision = warm_policy.after_exit(
                    last, stopping=self._stopping is not None, wedged=self._wedged
                )
                self._settle_in_flight(decision)
                self._listener.on_exit(self, record, last, decision)
                self.log.info(
                    "subagent.restart" if decision == "restart" else "subagent.exit",
                    task_id=record.task_id,
                    status=last.status.value,
                    decision=decision,
                    turns=self.turns - turns_before,
                )
                if decision == "end":
                    break
                if decision == "dormant":
                    self.state = "dormant"
                    restarts = 0
                    await self._wait_for_delivery()
                    if self._stopping is not None:
                        break
                    cause: Literal["crashed", "resumed"] = "resumed"
                else:
                    restarts = 0 if self.turns > turns_before else restarts
                    restarts += 1
                    cause = "crashed"
                self.state = "restarting"
                if not await self._restart(Restart(cause, restarts, last)):
                    break
        finally:
            self.state = "ended"
            self._fail_all("the warm session has ended")
            self._ended.set()
        return last

    async def _new_task(self) -> TaskRecord:
        limits = self.payload.limits
        self.record = await self.journal.tasks.submit_claimed(
            self.spec,
            self.owner_uid,
            grant_steps=limits.max_steps,
            grant_tokens=limits.max_tokens,
            trigger=self.trigger,
        )
        return self.record

    async def _incarnation(self, record: TaskRecord) -> RunResult:
        if self._build is not None:
            payload = self._build(record)
        else:
            payload = self.payload.model_copy(update={"task_id": record.task_id, "run_id": record.run_id})
        run = TaskRun(self.ports, record, payload, claimed=True)
        run.on_root_turn = self._on_turn
        self._run, self._wedged, self.state = run, False, "starting"
        if self._stopping is not None:
            run.cancel(self._stopping)
        self.log.info("task.started", task_id=record.task_id, warm=True)
        if self.registry is not None:
            self.registry.adopt(record.task_id, run.cancel, run.pids)
        try:
            try:
                async with anyio.create_task_group() as tg:
                    tg.start_soon(self._pump, run)
                    result = await run.run()
                    tg.cancel_scope.cancel()
            except Exception as exc:  # the session's top level, as the scheduler's is a task's
                self.log.exception("task.terminal", task_id=record.task_id, err=f"internal error: {exc!r}")
                message = f"agentd internal error: {type(exc).__name__}"
                result = RunResult(
                    status=TerminalStatus.CRASHED, error=RunError(kind="internal", message=message)
                )
            if result is None:  # its task was ended from outside before it started
                result = RunResult(status=TerminalStatus.CANCELLED)
            await self._record_terminal(record, result)
        finally:
            if self.registry is not None:
                self.registry.release(record.task_id)
        return result

    async def _pump(self, run: TaskRun) -> None:
        """Inject the waiting deliveries one by one, each after the previous turn's `ev/turn`."""
        await run.root_ready.wait()
        self.state = "idle"
        spec = self.payload.session
        while True:
            await self._wait_for_delivery()
            pending, self._queue = self._queue[0], self._queue[1:]
            self._seq += 1
            pending = Pending(pending.slot, pending.delivery, pending.injections + 1, pending.merged)
            self._in_flight, self.state = pending, "busy"
            reported = anyio.Event()
            slot: list[control.TurnParams] = []
            self._turn = (self._seq, reported, slot)
            message = warm_policy.render_delivery(pending.delivery)
            child = run.root_child
            inject = control.Inject(params=control.InjectParams(message=message, seq=self._seq))
            sent = child is not None and await child.send(inject)
            if sent:
                with anyio.move_on_after(warm_policy.turn_wait_s(spec.turn_deadline_s)):
                    await reported.wait()
            if not slot:
                # Not taken or not answered in time: the session is wedged. Its delivery is
                # re-injected (once) into a fresh one.
                self._wedged = True
                self.log.warning("subagent.stuck", seq=self._seq, uri=pending.delivery.uri, sent=sent)
                if child is not None:
                    child.stop("stuck", start="sigterm", reason="no ev/turn within the turn's bound")
                return
            self._answered(pending, slot[0])
            if slot[0].status is TerminalStatus.CANCELLED:
                return  # the session is ending: nothing more is injected into it
            self.state = "idle"

    def _on_turn(self, params: control.TurnParams) -> None:
        turn = self._turn
        if turn is None or params.seq != turn[0]:
            return  # a stale or unknown turn: nobody waits for it
        turn[2].append(params)
        turn[1].set()
        self._turn = None

    def _answered(self, pending: Pending, params: control.TurnParams) -> None:
        self._in_flight = None
        self.turns += 1
        record = self.record
        assert record is not None
        outcome = TurnOutcome(
            pending.delivery,
            params.status,
            result=params.result,
            partial=params.partial,
            usage=params.usage,
            task_id=record.task_id,
            seq=params.seq,
            injections=pending.injections,
        )
        fields: dict[str, JsonValue] = {
            "seq": params.seq,
            "trigger": pending.delivery.trigger,
            "uri": pending.delivery.uri[:2000],
            "status": params.status.value,
            "injections": pending.injections,
            "merged": pending.merged,
            "tokens_in": params.usage.tokens_in,
            "tokens_out": params.usage.tokens_out,
            "steps": params.usage.steps,
            "tool_calls": params.usage.tool_calls,
            "dur_ms": params.dur_ms,
        }
        self.journal.append_event(record.task_id, "session.turn", fields)
        self.log.info("session.turn", task_id=record.task_id, **fields)
        self._resolve(pending, outcome)

    def _resolve(self, pending: Pending, outcome: TurnOutcome) -> None:
        for waiter in self._waiters.pop(pending.slot, []):
            waiter.outcome = (
                outcome if waiter.delivery is outcome.delivery else _coalesced(outcome, waiter.delivery)
            )
            waiter.done.set()
        self._listener.on_turn(self, outcome)

    def _settle_in_flight(self, decision: ExitDecision) -> None:
        """The incarnation ended with a delivery unanswered: re-inject it once into the next one."""
        pending, self._in_flight, self._turn = self._in_flight, None, None
        if pending is None:
            return
        if decision != "end":
            self._queue, kept = warm_policy.redeliver(self._queue, pending)
            if kept:
                return
            if any(p.delivery.uri == pending.delivery.uri for p in self._queue):
                # A newer delivery for the URI will be injected: its turn answers this one too.
                newer = next(p for p in self._queue if p.delivery.uri == pending.delivery.uri)
                self._waiters.setdefault(newer.slot, []).extend(self._waiters.pop(pending.slot, []))
                return
        why = (
            "the warm session ended during its turn"
            if decision == "end"
            else "the session crashed on it twice"
        )
        self._resolve(pending, TurnOutcome(pending.delivery, None, injections=pending.injections, error=why))

    def _fail_all(self, why: str) -> None:
        queue, self._queue = self._queue, ()
        if self._in_flight is not None:
            queue = (self._in_flight, *queue)
            self._in_flight = None
        for pending in queue:
            self._resolve(
                pending, TurnOutcome(pending.delivery, None, injections=pending.injections, error=why)
            )

    async def _wait_for_delivery(self) -> None:
        """Until a delivery waits or the session is stopping (the owner's `stop` bounds this)."""
        while not self._queue and self._stopping is None:
            self._arrived = anyio.Event()
            await self._arrived.wait()
        if self._stopping is not None and self.state != "dormant":
            # Stopping: no new turn; the run's cancel ends the child.
            await anyio.sleep_forever()

    async def _record_terminal(self, record: TaskRecord, result: RunResult) -> None:
        code = int(exit_code(result, clean_drain=self.ports.drain.draining and not self.ports.drain.forced))
        try:
            await self.journal.tasks.mark_terminal(
                record.task_id,
                result.status,
                exit_code=code,
                result=result.result,
                partial=result.partial,
                usage=result.usage,
                abort=result.abort,
                error=result.error,
                idle=result.idle,
            )
        except JournalError as exc:
            # Restart recovery reconciles a task whose end could not be recorded.
            self.log.error("task.terminal", task_id=record.task_id, err=f"journal: {exc}")
            return
        self.log.info(
            "task.terminal",
            task_id=record.task_id,
            status=result.status.value,
            exit_code=code,
            tokens=result.usage.tokens,
            idle=result.idle,
        )


def _coalesced(outcome: TurnOutcome, older: Delivery) -> TurnOutcome:
    """The outcome as an older, superseded delivery's caller sees it."""
    return TurnOutcome(
        outcome.delivery,
        outcome.status,
        result=outcome.result,
        partial=outcome.partial,
        usage=outcome.usage,
        task_id=outcome.task_id,
        seq=outcome.seq,
        injections=outcome.injections,
        coalesced=older is not outcome.delivery,
        error=outcome.error,
    )
