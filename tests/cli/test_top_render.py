"""`agentd top`'s screen drawn at a given width (rich, no daemon): at 80 columns every header is
whole, the id column shows short ids, nothing runs past the edge, and narrower screens lose the
low-value columns first."""

from __future__ import annotations

import io

import pytest
from rich.console import Console

from agentd.cli.columns import cells
from agentd.cli.top import render
from agentd.cli.top_model import COLUMNS, ProcStats, Snapshot, table_rows, top_task, totals
from protocol.api import DaemonStatus, NodeView, TaskView
from protocol.result import RunUsage

NOW = 1_000.0
# Submitted in different milliseconds: their short ids are the first 14 characters.
TASK_IDS = ("t_01JBX4K9Q2M7ABCDEFGHJKMNPQ", "t_01JBX4K9R2M7ABCDEFGHJKMNPR")


def _node(handle: str, state: str, pid: int) -> NodeView:
    return NodeView(
        handle=handle,
        parent=handle.rpartition(".")[0] or None,
        depth=handle.count("."),
        state=state,
        pid=pid,
        usage=RunUsage(tokens_in=123_456, tokens_out=7_890, steps=12),
        grant_steps=40,
        grant_tokens=200_000,
    )


def _snapshot() -> Snapshot:
    tasks = []
    for n, task_id in enumerate(TASK_IDS):
        view = TaskView(task_id=task_id, run_id="r", owner_uid=0, state="running", started_at=NOW - 3725)
        nodes = [
            _node("0", "awaiting_approval", 10 + n),
            _node("0.1", "running", 20 + n),
            _node("0.1.1", "running", 30),
        ]
        stats = {pid: ProcStats(cpu_percent=12.5, rss_bytes=45 << 20) for pid in (10 + n, 20 + n, 30)}
        tasks.append(top_task(view, nodes, stats, {}, now=NOW))
    daemon = DaemonStatus(
        pid=4242,
        version="0.1.0",
        uptime_s=90_000,
        draining=False,
        queued=3,
        running=2,
        max_concurrent_tasks=8,
        journal_ok=True,
        zygote="warm",
        scope="caller",
    )
    return Snapshot(at=NOW, daemon=daemon, tasks=tasks, totals=totals(tasks))


def _screen(width: int) -> list[str]:
    console = Console(file=io.StringIO(), width=width, color_system=None, force_terminal=False)
    console.print(render(_snapshot(), width))
    text = console.file.getvalue()  # type: ignore[attr-defined]
    return [line.rstrip() for line in text.splitlines()]


def _header(lines: list[str]) -> str:
    return next(line for line in lines if line.startswith("TASK / NODE"))


def test_at_80_columns_every_header_is_whole_and_nothing_runs_past_the_edge() -> None:
    lines = _screen(80)
    header = _header(lines)
    shown = [c.header for c in COLUMNS if c.header in header]
    assert shown[:2] == ["TASK / NODE", "STATUS"]
    assert "…" not in header
    # The headers are whole words separated by spaces, in order: none was cut into another.
    rest = header
    for name in shown:
        assert name in rest
        rest = rest[rest.index(name) + len(name) :]
    assert rest.strip() == ""
    assert all(cells(line) <= 80 for line in lines), "\n".join(lines)
    # Short ids, not the whole 28 characters.
    assert [line.split()[0] for line in lines if line.startswith("t_")] == [t[:14] for t in TASK_IDS]
    assert "awaiting_approval" in "\n".join(lines)  # the long status is never cut


def test_at_80_columns_age_goes_first_and_the_process_figures_stay() -> None:
    header = _header(_screen(80)).split("  ")
    names = [part.strip() for part in header if part.strip()]
    assert "AGE" not in names
    assert {"STEP", "TOKENS", "CPU%"} <= set(names)


@pytest.mark.parametrize("width", [60, 100, 160])
def test_every_width_keeps_the_id_and_status_and_fits(width: int) -> None:
    lines = _screen(width)
    header = _header(lines)
    assert header.startswith("TASK / NODE") and "STATUS" in header and "…" not in header
    assert all(cells(line) <= width for line in lines), "\n".join(lines)


def test_wide_terminals_show_every_column() -> None:
    header = _header(_screen(160))
    assert [c.header for c in COLUMNS if c.header in header] == [c.header for c in COLUMNS]


def test_the_rows_are_a_tree_under_the_short_id() -> None:
    rows = table_rows(_snapshot())
    assert [row.cells[0] for row in rows[:3]] == [TASK_IDS[0][:14], "└─ 0.1", "   └─ 0.1.1"]
    assert [row.root for row in rows[:3]] == [True, False, False]
