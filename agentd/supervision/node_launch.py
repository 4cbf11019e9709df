"""One node's child, from its fork to its reaped exit, in write-ahead order (docs/design.md §3, §5).

`NodeLaunch.run` takes the node's child — a prestarted one its trigger parked, or a fresh fork
inside the spawn window — journals it `starting` while the zygote forks and `running` (with its pid
and start time) before the child hears its task, then supervises it as a `SupervisedChild` and
returns its one result. A child that cannot be recorded is killed before it is given its task.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Protocol

import anyio
import anyio.abc
import structlog

from agentd.errors import AgentdError, InvalidTransition, JournalError
from agentd.journal.records import TaskRecord
from agentd.spawning.cgroup import CgroupLeaf
from agentd.spawning.spawner import SpawnedProcess, SpawnRequest
from agentd.supervision.node_slots import NodeSlots
from agentd.supervision.parking import same_task
from agentd.supervision.ports import ParkedChild, RunPorts
from agentd.supervision.spawn_window import Place
from agentd.supervision.supervised_child import ChildIdentity, ChildListener, SupervisedChild
from agentd.supervision.tree import Node, Tree
from protocol.result import RunError, RunResult, RunUsage, TerminalStatus
from protocol.spawn import SpawnPayload

Spawned = tuple[SpawnedProcess, CgroupLeaf | None]


class TaskGone(AgentdError):
    """The task ended (a cancel while it was queued) before its run could claim it."""


@dataclass
class WriteAhead:
    """A node's `starting` write, committing in the background while its child is forked."""

    done: anyio.Event = field(default_factory=anyio.Event)
    error: BaseException | None = None

    @classmethod
    def committed(cls) -> WriteAhead:
        """Nothing to wait for (written already, or written later with the `running` record)."""
        ahead = cls()
        ahead.done.set()
        return ahead

    async def wait(self) -> None:
        """Return once it is committed; raise what it failed with."""
        await self.done.wait()
        if self.error is not None:
            raise self.error


@dataclass
class NodeRun:
    """One subagent of the task, live or ended."""

    handle: str
    payload: SpawnPayload
    child: SupervisedChild | None = None
    result: RunResult | None = None
    counted: RunUsage = field(default_factory=RunUsage)
    # Set when the supervisor stopped this node for going over its grant (and, for its cost
    # grant, why: the status alone would say tokens).
    limit_status: TerminalStatus | None = None
    limit_error: RunError | None = None
    done: anyio.Event = field(default_factory=anyio.Event)
    # Its place in the spawn window (agentd/supervision/spawn_window.py), held while it boots, and
    # the scope of its wait for one (a cancel while it waits ends the wait: it never spawns).
    place: Place = field(default_factory=lambda: Place(None))
    waiting: anyio.CancelScope | None = None
    # Its model requests' slots of limited endpoints (agentd/supervision/node_slots.py).
    slots: NodeSlots = field(default_factory=NodeSlots.none)


class LaunchingRun(Protocol):
    """What a launch reads of its task's run; it writes back only the task's record."""

    ports: RunPorts
    record: TaskRecord
    tree: Tree
    claimed: bool
    cancel_reason: str | None
    log: structlog.typing.FilteringBoundLogger


class NodeLaunch:
    """Launches and supervises one node's child; `run` once."""

    __slots__ = ("listener", "log", "node", "ports", "task_run", "tg")

    def __init__(
        self, run: LaunchingRun, node: NodeRun, listener: ChildListener, tg: anyio.abc.TaskGroup
    ) -> None:
        self.task_run = run
        self.ports = run.ports
        self.node = node
        self.listener = listener
        # The run's task group: the background `starting` write runs in it.
        self.tg = tg
        self.log = run.log.bind(handle=node.handle)

    @property
    def tree_node(self) -> Node:
        return self.task_run.tree.nodes[self.node.handle]

    async def run(self) -> RunResult:
        """The node's child to its reaped exit; its one result (`cancelled` if stopped before it
        had a place to start in)."""
        # Write-ahead, overlapped: the node's `starting` commit runs while the zygote forks, and
        # the child hears nothing (no `ctrl/spawn`) until both it and `running` are committed.
        parked = await self._take_parked()
        # A prestarted child exists already: its `starting` and `running` commit together below.
        starting = self._write_starting() if parked is None else WriteAhead.committed()
        spawned = await self._acquire(parked, starting)
        if spawned is None:  # stopped while it waited for its place in the spawn window
            with anyio.CancelScope(shield=True):
                await starting.wait()
            why = RunError(
                kind="cancelled", message=self.task_run.cancel_reason or "stopped before it started"
            )
            return RunResult(status=TerminalStatus.CANCELLED, error=why)
        held = parked.payload if parked is not None else None
        child = self._child(*spawned)
        await self._record_running(child, starting, held)
        # Held for the child's whole life otherwise (with its events), for the collector to walk.
        del starting, spawned, parked
        return await self._supervise(child, held)

    async def _acquire(self, parked: ParkedChild | None, starting: WriteAhead) -> Spawned | None:
        """The parked child, or a fresh fork once the node has its place; None if it was stopped
        before it got one."""
        try:
            if parked is not None:
                # Prestarted while its trigger's debounce window was open: forked, booted and
                # prepared already (it holds its payload and waits for `ctrl/go`), so it needs no
                # place in the spawn window.
                assert parked.proc is not None
                return parked.proc, parked.leaf
            # Root and nested children alike: a spawn during the zygote's warm-up waits for it (bounded).
            await self.ports.spawner.settle()
            return await self._fork() if await self._enter_window() else None
        except BaseException:
            # No child: what follows (the node's end) is written after its `starting`.
            with anyio.CancelScope(shield=True):
                await starting.wait()
            raise

    def _child(self, proc: SpawnedProcess, leaf: CgroupLeaf | None) -> SupervisedChild:
        options, record = self.ports.options, self.task_run.record
        child = SupervisedChild(
            proc,
            ChildIdentity(record.task_id, record.run_id, self.node.handle),
            self.listener,
            deadline=self.tree_node.deadline,
            liveness=options.liveness,
            ladder=options.ladder,
            cgroup=leaf,
            teardown_grace_s=options.teardown_grace_s,
            stderr_line_cap=options.stderr_line_cap,
            clock=self.ports.clock,
        )
        self.node.child = child
        return child

    async def _record_running(
        self, child: SupervisedChild, starting: WriteAhead, held: SpawnPayload | None
    ) -> None:
        """Journal the child `running` once its `starting` is committed; a child that cannot be
        recorded (or whose task ended meanwhile) is killed and reaped before it hears its task."""
        journal, tree_node, proc = self.ports.journal, self.tree_node, child.proc
        try:
            await starting.wait()
            self.log.info(
                "subagent.spawn",
                pid=proc.pid,
                via=proc.via,
                parent=tree_node.parent,
                depth=tree_node.depth,
                grant_steps=tree_node.grant.steps,
                grant_tokens=tree_node.grant.tokens,
                # Subagents booting now, this one included (bounded by `supervision.spawn_window`).
                booting=self.ports.window.inside if self.ports.window is not None else None,
            )
            if held is not None:
                self._keep(await self._mark_started(proc))
            elif self.node.handle == "0":
                self._keep(
                    await journal.tasks.mark_running(self.task_run.record.task_id, proc.pid, proc.start_time)
                )
            else:
                await journal.tasks.upsert_node(
                    self.task_run.record.task_id,
                    self.node.handle,
                    parent=tree_node.parent,
                    depth=tree_node.depth,
                    state="running",
                    pid=proc.pid,
                    pid_start_time=proc.start_time,
                )
        except (JournalError, TaskGone) as exc:
            # It must not run unrecorded (nor at all, for a task already ended): kill and reap it,
            # before it was ever given its task, then report the failure.
            if isinstance(exc, TaskGone):
                child.stop("cancel", start="sigkill", reason="the task ended before it started")
            else:
                child.stop("faulty", start="sigkill")
            with anyio.CancelScope(shield=True):
                await child.run(self.node.payload)
            raise

    async def _supervise(self, child: SupervisedChild, held: SpawnPayload | None) -> RunResult:
        """Give the recorded child its task (unless the run is stopping) and wait for its result."""
        drain, pid = self.ports.drain, child.pid
        if self.tree_node.stopping or drain.draining:
            child.stop(
                "drain" if drain.draining else "cancel",
                start="sigkill" if drain.forced else "cancel",
                reason=self.task_run.cancel_reason or "agentd is shutting down",
            )
        if self.node.handle == "0":
            self.task_run.log.info("task.started", pid=pid, attempt=self.task_run.record.attempts + 1)
        result = await child.run(self.node.payload, held=held)
        exit_desc = child.exit_info.describe if child.exit_info else "unknown"
        self.log.info("subagent.exit", pid=pid, status=result.status.value, exit=exit_desc)
        self.ports.journal.append_event(
            self.task_run.record.task_id,
            "subagent.exit",
            {"handle": self.node.handle, "pid": pid, "exit": exit_desc, "status": result.status.value},
        )
        return result

    # ---- the write-ahead records -----------------------------------------------------------

    def _write_starting(self) -> WriteAhead:
        """Journal the node as `starting` (the root: the task `queued → starting`), in the background."""
        ahead = WriteAhead()
        if self.node.handle == "0" and self.task_run.claimed:  # its owner journaled it `starting` already
            ahead.done.set()
            return ahead
        self.tg.start_soon(self._starting, ahead)
        return ahead

    async def _starting(self, ahead: WriteAhead) -> None:
        journal, tree_node, node = self.ports.journal, self.tree_node, self.node
        task_id, grant = self.task_run.record.task_id, tree_node.grant
        try:
            if node.handle == "0":
                self._keep(
                    await journal.tasks.mark_starting(
                        task_id, grant_steps=grant.steps, grant_tokens=grant.tokens
                    )
                )
            else:
                await journal.tasks.upsert_node(
                    task_id,
                    node.handle,
                    parent=tree_node.parent,
                    depth=tree_node.depth,
                    state="starting",
                    grant_steps=grant.steps,
                    grant_tokens=grant.tokens,
                    # A resumed child ended in an earlier run (or not): it starts again either way.
                    revive=bool(node.payload.replay),
                )
        except InvalidTransition as exc:
            gone = node.handle == "0" and exc.task_id == task_id and exc.state == "terminal"
            ahead.error = TaskGone() if gone else exc
        except Exception as exc:  # noqa: BLE001 - re-raised by the spawn that waits for it
            ahead.error = exc
        finally:
            ahead.done.set()

    async def _mark_started(self, proc: SpawnedProcess) -> TaskRecord:
        """The root's `queued → starting → running` in one commit (its child is prestarted)."""
        grant, task_id = self.tree_node.grant, self.task_run.record.task_id
        try:
            return await self.ports.journal.tasks.mark_started(
                task_id, proc.pid, proc.start_time, grant_steps=grant.steps, grant_tokens=grant.tokens
            )
        except InvalidTransition as exc:
            if exc.task_id == task_id and exc.state == "terminal":
                raise TaskGone() from None
            raise

    def _keep(self, record: TaskRecord) -> None:
        """The task's record as the journal now has it, sharing the spec (never changed by a run)
        with the record already held: one copy of its models per live task, not two."""
        held = self.task_run.record
        same = record.spec == held.spec and record.usage == held.usage
        self.task_run.record = (
            dataclasses.replace(record, spec=held.spec, usage=held.usage) if same else record
        )

    # ---- the child -------------------------------------------------------------------------

    async def _take_parked(self) -> ParkedChild | None:
        """The root's prestarted child, if its trigger parked one for this task and it holds this
        very task (a reload may have changed the endpoint or the grant meanwhile: then it is
        killed and the root forked as usual)."""
        parking, record = self.ports.parking, self.task_run.record
        if parking is None or self.node.handle != "0" or record.trigger is None:
            return None
        parked = await parking.take(record.task_id)
        if parked is not None and not same_task(parked.payload, self.node.payload):
            parking.kill(parked, "its task's payload changed")
            return None
        return parked

    async def _enter_window(self) -> bool:
        """Take the node's place in the spawn window, in turn; False if it was stopped meanwhile."""
        window, node = self.ports.window, self.node
        if window is None or window.size is None:
            return True
        with anyio.CancelScope() as node.waiting:
            if not self.tree_node.stopping:
                node.place = await window.enter()
        node.waiting = None
        return not node.place.released  # still the unset place: stopped before it got one

    async def _fork(self) -> Spawned:
        """Fork the node's child (in its own cgroup leaf when cgroups are on)."""
        options, record, handle = self.ports.options, self.task_run.record, self.node.handle
        leaf = None
        if self.ports.cgroups is not None:
            leaf = self.ports.cgroups.create_leaf(
                f"{record.task_id}-{handle}", memory_max=options.memory_max, pids_max=options.pids_max
            )
        proc = await self.ports.spawner.spawn_child(
            SpawnRequest(
                task_id=record.task_id,
                run_id=record.run_id,
                handle=handle,
                rlimits=options.rlimits,
                cgroup=str(leaf.path) if leaf else None,
                argv=options.child_argv,
            )
        )
        return proc, leaf
