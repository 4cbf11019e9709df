"""What the API reads of the supervisor's memory, as frozen data that may cross to the API's loop.

A task's view adds to its journal record what only the running supervisor knows (its root
child's pid, whether it waits for a person, a provider limit holding it) and `daemon.status` adds
the daemon's load. `LiveFigures` is all of that, taken on the supervisor's loop in one go and
handed as one immutable object to the API's loop, which never touches the supervisor's mutable
state itself (docs/decisions.md, "API reads on a loop of their own").
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field

from agentd.journal.records import JournalHealth, TaskRecord
from agentd.spawning.spawner import ZygoteState
from agentd.supervision.provider_desk import Waiting
from agentd.supervision.supervisor import Supervisor
from agentd.triggers.manager import TriggerManager
from protocol.api import DaemonStatus, TaskState, TaskView, ThrottleView

VERSION = "0.1.0"


@dataclass(frozen=True, slots=True)
class TaskLive:
    """What the supervisor knows of one running task beyond its journal record."""

    pid: int | None = None
    awaiting_approval: bool = False
    throttled: Waiting | None = None


@dataclass(frozen=True, slots=True)
class LiveFigures:
    """The supervisor's state the API reads, as of `taken_at` (monotonic)."""

    taken_at: float
    tasks: Mapping[str, TaskLive] = field(default_factory=dict)
    running: int = 0
    running_by_owner: Mapping[int, int] = field(default_factory=dict)
    children: int = 0
    draining: bool = False
    max_concurrent_tasks: int = 0
    zygote: ZygoteState = "off"
    triggers: Mapping[str, int] = field(default_factory=dict)
    failed_triggers: tuple[str, ...] = ()


def live_task(
    supervisor: Supervisor, task_id: str, throttled: Mapping[str, Waiting] | None = None
) -> TaskLive | None:
    """One task's live facts, read on the supervisor's loop; None if it is not running here.
    `throttled` is `all_throttled()` when the caller reads many tasks at once."""
    slot = supervisor.running.get(task_id)
    run = slot.run if slot is not None else None
    if run is None:
        return None
    child = run.root_child
    return TaskLive(
        pid=child.pid if child is not None else None,
        awaiting_approval=bool(run.awaiting_approval()),
        throttled=(supervisor.providers.throttled(task_id) if throttled is None else throttled.get(task_id)),
    )


def take_figures(
    supervisor: Supervisor,
    triggers: TriggerManager | None,
    children: Callable[[], int],
    now: float,
    *,
    with_tasks: bool = True,
) -> LiveFigures:
    """The daemon's load and (`with_tasks`) every running task's live facts, read on the
    supervisor's loop."""
    tasks = {}
    owners: Counter[int] = Counter()
    throttled = supervisor.providers.all_throttled() if with_tasks else {}
    for task_id, slot in supervisor.running.items():
        owners[slot.record.owner_uid] += 1
        live = live_task(supervisor, task_id, throttled) if with_tasks else None
        if live is not None and live != _NOTHING_LIVE:
            tasks[task_id] = live
    return LiveFigures(
        taken_at=now,
        tasks=tasks,
        running=len(supervisor.running),
        running_by_owner=dict(owners),
        children=children(),
        draining=supervisor.draining,
        max_concurrent_tasks=supervisor.options.max_concurrent_tasks,
        zygote=supervisor.spawner.state,
        triggers=triggers.summary() if triggers is not None else {},
        failed_triggers=tuple(triggers.failed()) if triggers is not None else (),
    )


_NOTHING_LIVE = TaskLive()


def task_view(record: TaskRecord, live: TaskLive | None, now: float) -> TaskView:
    """A task's journal record with what the supervisor knows of it (`now` is monotonic)."""
    view = record.to_view()
    if live is None:
        return view
    if live.pid is not None and view.pid is None:
        view = view.model_copy(update={"pid": live.pid})
    if live.awaiting_approval and view.state == "running":
        view = view.model_copy(update={"state": "awaiting_approval"})
    waiting = live.throttled
    if waiting is not None:
        throttled = ThrottleView(
            endpoint=waiting.endpoint,
            blocked_by=waiting.blocked_by,
            waiting_s=max(now - waiting.since, 0.0),
        )
        view = view.model_copy(update={"throttled": throttled})
    return view


def daemon_status(
    figures: LiveFigures,
    counts: Mapping[TaskState, int],
    health: JournalHealth,
    *,
    owner: int | None,
    pid: int,
    uptime_s: float,
) -> DaemonStatus:
    """`daemon.status`: its health for everyone; its load (counts) and its triggers only for
    admins (`owner` None). A non-admin gets the counts of its own tasks (`scope: caller`) and no
    trigger (the operator's configuration, and a failing one's error, are not every user's)."""
    if owner is None:
        running, children = figures.running, figures.children
    else:
        running, children = figures.running_by_owner.get(owner, 0), 0
    return DaemonStatus(
        pid=pid,
        version=VERSION,
        uptime_s=uptime_s,
        draining=figures.draining,
        queued=counts.get("queued", 0),
        running=running,
        max_concurrent_tasks=figures.max_concurrent_tasks,
        journal_ok=health.healthy,
        degraded=[] if health.healthy else [f"journal: {health.last_error}"],
        children=children,
        scope="daemon" if owner is None else "caller",
        zygote=figures.zygote,
        triggers=dict(figures.triggers) if owner is None else {},
        failed_triggers=list(figures.failed_triggers) if owner is None else [],
    )
