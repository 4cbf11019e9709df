"""What a task run is given by its host: its options and narrow ports to the journal, the spawner
and the daemon's drain state.

`TaskRun` depends on these, never on the `Supervisor`, so a test can build one from small fakes.
The real journal and spawners satisfy the protocols structurally.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Protocol

from pydantic import JsonValue

from agentd.journal.records import NodeRecord, NodeState, TaskRecord
from agentd.metrics.port import NULL_METRICS, Metrics
from agentd.spawning.cgroup import CgroupLeaf, CgroupRoot
from agentd.spawning.spawner import RLimits, SpawnedProcess, SpawnRequest
from agentd.supervision.approvals import ApprovalDesk
from agentd.supervision.liveness import LivenessPolicy
from agentd.supervision.pricing import Price
from agentd.supervision.provider_desk import ProviderDesk
from agentd.supervision.spawn_window import SpawnWindow
from agentd.supervision.watch_clock import WatchClock
from processes.ladder import LadderPolicy
from protocol.result import RunUsage, TerminalStatus
from protocol.spawn import SpawnPayload
from protocol.transcript import StepItem


@dataclass(frozen=True, slots=True)
class RunOptions:
    """How one task's subagents are started and supervised, fixed when the task starts."""

    liveness: LivenessPolicy = field(default_factory=LivenessPolicy)
    ladder: LadderPolicy = field(default_factory=LadderPolicy)
    rlimits: RLimits = field(default_factory=RLimits)
    memory_max: int | None = None
    pids_max: int | None = None
    teardown_grace_s: float = 10.0
    child_argv: tuple[str, ...] | None = None
    # A nested child's grant when its parent asks for none (always capped by what the parent has).
    child_steps: int = 20
    child_tokens: int = 50_000
    stderr_line_cap: int = 8192
    # `[intelligence.NAME] price` of each priced endpoint (agentd/supervision/pricing.py).
    prices: Mapping[str, Price] = field(default_factory=dict)


class RunTasks(Protocol):
    """The task writes of one task run; each commits before the step it records (docs/design.md §8)."""

    async def mark_starting(
        self, task_id: str, *, grant_steps: int | None = None, grant_tokens: int | None = None
    ) -> TaskRecord: ...

    async def mark_running(self, task_id: str, pid: int, pid_start_time: float) -> TaskRecord: ...

    async def mark_started(
        self,
        task_id: str,
        pid: int,
        pid_start_time: float,
        *,
        grant_steps: int | None = None,
        grant_tokens: int | None = None,
    ) -> TaskRecord:
        """`mark_starting` and `mark_running` in one commit (a child that exists already)."""
        ...

    async def upsert_node(
        self,
        task_id: str,
        handle: str,
        *,
        parent: str | None,
        depth: int,
        state: NodeState = "starting",
        pid: int | None = None,
        pid_start_time: float | None = None,
        usage: RunUsage | None = None,
        grant_steps: int | None = None,
        grant_tokens: int | None = None,
        revive: bool = False,
    ) -> NodeRecord: ...

    async def end_node(
        self, task_id: str, handle: str, status: TerminalStatus, usage: RunUsage | None = None
    ) -> NodeRecord: ...

    async def nodes(self, task_id: str) -> tuple[NodeRecord, ...]:
        """The task's nodes as journaled (a resumed run reads those its earlier runs ended)."""
        ...


class RunJournal(Protocol):
    """The journal of one task run: its task's writes and the events it appends."""

    @property
    def tasks(self) -> RunTasks: ...

    def append_event(
        self, task_id: str, event: str, fields: Mapping[str, JsonValue] | None = None
    ) -> None: ...


class StepJournal(Protocol):
    """Where each node's transcript is journaled (agentd/journal/transcripts.py)."""

    async def append(self, task_id: str, handle: str, items: Sequence[StepItem]) -> int:
        """Commit `items` after the node's last; how many the node's transcript holds now."""
        ...

    async def items(self, task_id: str, handle: str = "0") -> Sequence[JournaledStep]:
        """The node's transcript, oldest first."""
        ...

    async def children(self, task_id: str) -> dict[str, str | None]:
        """The task's nested nodes with a transcript, each with its parent's spawning call id."""
        ...


class JournaledStep(Protocol):
    @property
    def item(self) -> StepItem: ...


class ChildSpawner(Protocol):
    """Starts one subagent process (or raises `SpawnError`)."""

    async def spawn_child(self, request: SpawnRequest) -> SpawnedProcess: ...

    async def settle(self) -> None:
        """Wait, bounded, for a starting zygote (so a burst forks instead of exec'ing)."""
        ...


class ParkedChildren(Protocol):
    """Where a trigger's prestarted child waits for its task's run (agentd/supervision/parking.py)."""

    async def take(self, task_id: str) -> ParkedChild | None:
        """The parked child for `task_id`, now the caller's; None when there is none."""
        ...

    def kill(self, entry: ParkedChild, reason: str) -> None:
        """Kill and reap a taken child the run will not use."""
        ...


class ParkedChild(Protocol):
    """A prestarted child: its process, its cgroup leaf, and the payload it holds."""

    @property
    def proc(self) -> SpawnedProcess | None: ...
    @property
    def leaf(self) -> CgroupLeaf | None: ...
    @property
    def payload(self) -> SpawnPayload: ...


@dataclass
class DrainState:
    """The daemon's shutdown state: set by the scheduler, read by every task run."""

    draining: bool = False
    # A second signal asked for SIGKILL now. Invariant: only ever set while draining.
    forced: bool = False


@dataclass(frozen=True, slots=True)
class RunPorts:
    """Everything a `TaskRun` needs from outside itself."""

    journal: RunJournal
    spawner: ChildSpawner
    drain: DrainState = field(default_factory=DrainState)
    options: RunOptions = field(default_factory=RunOptions)
    # The delegated cgroup that holds one leaf per subagent; None runs them without one.
    cgroups: CgroupRoot | None = None
    # Where spawn latency, child events, ladder rungs and detector firings are counted.
    metrics: Metrics = NULL_METRICS
    # Where gated tool calls wait for a person; None (`agentd run`: nobody to ask) denies them.
    approvals: ApprovalDesk | None = None
    # How many subagents may boot at once (shared by every run of the daemon); None: no bound.
    window: SpawnWindow | None = None
    # The one timer that checks every child's liveness; None: each child checks itself.
    clock: WatchClock | None = None
    # Trigger tasks' prestarted children, taken by their root instead of a fork; None: none.
    parking: ParkedChildren | None = None
    # Where subagents' steps are journaled (`sup/record`); None: they are acknowledged and
    # dropped (a run nothing will resume).
    steps: StepJournal | None = None
    # Provider limits shared by every task of the daemon (`sup/slot`); None: no endpoint is limited.
    providers: ProviderDesk | None = None
