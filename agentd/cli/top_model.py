"""What `agentd top` shows: one snapshot of the caller's running tasks as trees (pure).

Built from what the socket API already answers (`daemon.status`, `task.list`, `task.tree`,
`task.events`) plus each subagent process's CPU and memory; the daemon's own uid scoping decides
which tasks a caller sees, so this module never filters by owner. The same snapshot is drawn as
a live table or printed once as JSON.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Literal

from pydantic import BaseModel, ConfigDict

from agentd.cli.columns import Column
from agentd.cli.display import human_age, human_bytes, human_count, one_line, plural
from agentd.cli.task_ids import short_ids
from protocol.api import DaemonStatus, NodeView, TaskView

SortKey = Literal["age", "cpu", "tokens"]


class _Model(BaseModel):
    model_config = ConfigDict(frozen=True)


class ProcStats(_Model):
    cpu_percent: float | None = None
    rss_bytes: int | None = None


class LastEvent(_Model):
    event: str
    ts: float


class TopNode(_Model):
    handle: str
    parent: str | None
    depth: int
    state: str
    status: str | None
    pid: int | None
    steps: int
    grant_steps: int | None
    tokens: int
    grant_tokens: int | None
    cpu_percent: float | None = None
    rss_bytes: int | None = None
    last_event: LastEvent | None = None


class TopTask(_Model):
    task_id: str
    state: str
    instruction: str
    model: str | None
    age_s: float | None
    nodes: list[TopNode]
    # A model request of the task waits for a provider-limit slot (docs/budgets.md).
    throttled: bool = False
    # What its model calls cost so far, as the daemon priced them.
    cost_usd: float = 0.0

    @property
    def cpu_percent(self) -> float:
        return sum(n.cpu_percent or 0.0 for n in self.nodes)

    @property
    def tokens(self) -> int:
        return sum(n.tokens for n in self.nodes)


class Totals(_Model):
    tasks: int
    subagents: int
    tokens: int
    cpu_percent: float
    rss_bytes: int
    cost_usd: float = 0.0


class Snapshot(_Model):
    at: float
    daemon: DaemonStatus
    tasks: list[TopTask]
    totals: Totals


def top_node(view: NodeView, stats: ProcStats | None, last: LastEvent | None) -> TopNode:
    live = view.state != "terminal"
    return TopNode(
        handle=view.handle,
        parent=view.parent,
        depth=view.depth,
        state=view.state,
        status=view.status.value if view.status else None,
        pid=view.pid if live else None,
        steps=view.usage.steps,
        grant_steps=view.grant_steps,
        tokens=view.usage.tokens,
        grant_tokens=view.grant_tokens,
        cpu_percent=stats.cpu_percent if stats and live else None,
        rss_bytes=stats.rss_bytes if stats and live else None,
        last_event=last,
    )


def top_task(
    view: TaskView,
    nodes: Sequence[NodeView],
    stats: Mapping[int, ProcStats],
    last_events: Mapping[str, LastEvent],
    *,
    now: float,
) -> TopTask:
    """One task: its nodes in tree order (each parent before its children, siblings by number)."""
    ordered = sorted(nodes, key=lambda n: [int(p) for p in n.handle.split(".")])
    return TopTask(
        task_id=view.task_id,
        state=view.state,
        instruction=view.instruction,
        model=view.model,
        age_s=max(0.0, now - view.started_at) if view.started_at is not None else None,
        throttled=view.throttled is not None,
        cost_usd=view.usage.cost_usd,
        nodes=[
            top_node(n, stats.get(n.pid) if n.pid is not None else None, last_events.get(n.handle))
            for n in ordered
        ],
    )


def totals(tasks: Sequence[TopTask]) -> Totals:
    live = [n for t in tasks for n in t.nodes if n.state != "terminal"]
    return Totals(
        tasks=len(tasks),
        subagents=len(live),
        tokens=sum(t.tokens for t in tasks),
        cpu_percent=round(sum(n.cpu_percent or 0.0 for n in live), 1),
        rss_bytes=sum(n.rss_bytes or 0 for n in live),
        cost_usd=round(sum(t.cost_usd for t in tasks), 6),
    )


def sort_tasks(tasks: Sequence[TopTask], key: SortKey) -> list[TopTask]:
    """Oldest first, busiest CPU first, or most tokens first; ties by task id (stable)."""
    if key == "cpu":
        return sorted(tasks, key=lambda t: (-t.cpu_percent, t.task_id))
    if key == "tokens":
        return sorted(tasks, key=lambda t: (-t.tokens, t.task_id))
    return sorted(tasks, key=lambda t: (-(t.age_s or 0.0), t.task_id))


def tree_prefixes(nodes: Sequence[TopNode]) -> dict[str, str]:
    """The tree guide drawn before each handle (`├─ `, `└─ `, `│  `), for nodes in tree order."""
    children: dict[str | None, list[str]] = {}
    for node in nodes:
        children.setdefault(node.parent, []).append(node.handle)
    out: dict[str, str] = {}

    def walk(handle: str, lead: str) -> None:
        kids = children.get(handle, [])
        for index, kid in enumerate(kids):
            last = index == len(kids) - 1
            out[kid] = lead + ("└─ " if last else "├─ ")
            walk(kid, lead + ("   " if last else "│  "))

    for root in children.get(None, []):
        out[root] = ""
        walk(root, "")
    for node in nodes:  # a node whose parent is missing from the view still shows, flush left
        out.setdefault(node.handle, "")
    return out


# What a row shows, and what goes first when the terminal is narrow: AGE, then RSS, then the last
# event (cut down to its header before anything is dropped), then CPU%, TOKENS, STEP.
COLUMNS = (
    Column("TASK / NODE", keep=True),
    Column("STATUS", keep=True),
    Column("STEP", rank=5, right=True),
    Column("TOKENS", rank=4, right=True),
    Column("AGE", rank=0, right=True),
    Column("CPU%", rank=3, right=True),
    Column("RSS", rank=1, right=True),
    Column("LAST EVENT", shrink=True, rank=2),
)


class Row(_Model):
    root: bool  # a task's own line (its root node), drawn bold
    cells: tuple[str, ...]  # one per column of COLUMNS


def table_rows(snapshot: Snapshot) -> list[Row]:
    """One row per node, each task's nodes as a tree under its short id."""
    short = short_ids(t.task_id for t in snapshot.tasks)
    rows = []
    for task in snapshot.tasks:
        prefixes = tree_prefixes(task.nodes)
        for node in task.nodes:
            root = node.handle == "0"
            last = node.last_event
            cells = (
                short[task.task_id] if root else f"{prefixes[node.handle]}{node.handle}",
                node.status or ("throttled" if root and task.throttled else node.state),
                f"{node.steps}/{node.grant_steps or '-'}",
                f"{human_count(node.tokens)}/{human_count(node.grant_tokens)}",
                human_age(task.age_s) if root else "",
                "-" if node.cpu_percent is None else f"{node.cpu_percent:.1f}",
                human_bytes(node.rss_bytes),
                f"{one_line(last.event)} {human_age(snapshot.at - last.ts)} ago" if last else "",
            )
            rows.append(Row(root=root, cells=cells))
    return rows


def footer_line(t: Totals) -> str:
    cost = f"${t.cost_usd:.4f} · " if t.cost_usd else ""
    return (
        f"{plural(t.tasks, 'task')} · {plural(t.subagents, 'subagent')} · {human_count(t.tokens)} tokens · "
        f"{cost}"
        f"CPU {t.cpu_percent:.1f}% · RSS {human_bytes(t.rss_bytes)} · q or Ctrl-C quits"
    )


def health_line(daemon: DaemonStatus) -> str:
    """The daemon's own line: pid, version, uptime, load, journal, drain and degradations."""
    parts = [
        f"agentd {daemon.version} pid {daemon.pid}",
        f"up {human_age(daemon.uptime_s)}",
        f"running {daemon.running}/{daemon.max_concurrent_tasks}",
        f"queued {daemon.queued}",
        "journal ok" if daemon.journal_ok else "JOURNAL FAILING",
    ]
    if daemon.zygote != "off":
        parts.append(f"zygote {daemon.zygote}")
    if daemon.draining:
        parts.append("DRAINING")
    if daemon.degraded:
        parts.append("degraded: " + ", ".join(daemon.degraded))
    if daemon.scope == "caller":
        parts.append("your tasks only")
    return " · ".join(parts)
