"""`agentd top`: a live view of the caller's running tasks as trees (docs/operations.md).

Each refresh asks the daemon, over the normal socket API, for its status, the caller's starting
and running tasks, each one's tree, and the events since the last refresh (only the last one per
node is kept); CPU% and RSS of each live subagent are read with psutil from /proc. The daemon's
uid scoping decides what a caller sees: a non-admin sees only their own tasks. On a terminal
the view is drawn by `rich` and redrawn every `--interval` until `q` or Ctrl-C; piped (or with
`--json`) one snapshot is printed as JSON.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import select
import sys
import termios
import time
import tty
from collections.abc import Iterator
from typing import TextIO

import psutil
from rich.console import Console, Group, JustifyMethod
from rich.live import Live
from rich.table import Table
from rich.text import Text

from agentd.api.client import ApiClient
from agentd.cli.client_commands import resolve_socket
from agentd.cli.columns import cells, fit
from agentd.cli.top_model import (
    COLUMNS,
    LastEvent,
    ProcStats,
    Snapshot,
    SortKey,
    TopTask,
    footer_line,
    health_line,
    sort_tasks,
    table_rows,
    top_task,
    totals,
)
from agentd.errors import ApiClientError
from protocol.api import (
    EventsParams,
    EventsRequest,
    EventView,
    ListParams,
    ListRequest,
    StatusRequest,
    TaskRef,
    TaskView,
    TreeRequest,
)
from protocol.exit_codes import ExitCode

MAX_TASKS = 1000  # one page of task.list per state
JSON_SAMPLE_S = 0.5  # a single snapshot still measures CPU over this long
CALL_TIMEOUT_S = 10.0


class Collector:
    """Builds snapshots, remembering what it needs between them: each task's last event seq and
    each node's last event, and a psutil handle per pid (CPU% is measured between two reads)."""

    def __init__(self, client: ApiClient, sort: SortKey = "age") -> None:
        self.client = client
        self.sort: SortKey = sort
        self._seq: dict[str, int] = {}
        self._last: dict[str, dict[str, LastEvent]] = {}
        self._procs: dict[int, psutil.Process] = {}

    def collect(self) -> Snapshot:
        now = time.time()
        daemon = self.client.call(StatusRequest(), timeout_s=CALL_TIMEOUT_S)
        views: list[TaskView] = []
        for state in ("starting", "running", "queued"):
            request = ListRequest(params=ListParams(state=state, limit=MAX_TASKS))
            page: list[TaskView] = self.client.call(request, timeout_s=CALL_TIMEOUT_S)
            # Of the queued ones, those that wait for more budget (`agentd extend`).
            views += page if state != "queued" else [v for v in page if v.state == "awaiting_budget"]
        tasks: list[TopTask] = []
        pids: set[int] = set()
        for view in views:
            try:
                nodes = self.client.call(
                    TreeRequest(params=TaskRef(task_id=view.task_id)), timeout_s=CALL_TIMEOUT_S
                )
                self._read_events(view.task_id)
            except ApiClientError:
                continue  # it ended (or went away) between the list and now
            live_pids = {n.pid for n in nodes if n.pid is not None and n.state != "terminal"}
            pids |= live_pids
            stats = {pid: self._stats(pid) for pid in live_pids}
            tasks.append(top_task(view, nodes, stats, self._last.get(view.task_id, {}), now=now))
        self._forget(pids, {t.task_id for t in tasks})
        ordered = sort_tasks(tasks, self.sort)
        return Snapshot(at=now, daemon=daemon, tasks=ordered, totals=totals(ordered))

    def _read_events(self, task_id: str) -> None:
        request = EventsRequest(params=EventsParams(task_id=task_id, after_seq=self._seq.get(task_id, 0)))
        last = self._last.setdefault(task_id, {})
        for item in self.client.stream(request, idle_timeout_s=CALL_TIMEOUT_S):
            if not isinstance(item, EventView):
                break
            self._seq[task_id] = item.seq
            handle = item.fields.get("handle")
            last[handle if isinstance(handle, str) else "0"] = LastEvent(event=item.event, ts=item.ts)

    def _stats(self, pid: int) -> ProcStats:
        try:
            proc = self._procs.get(pid)
            if proc is None:
                proc = self._procs[pid] = psutil.Process(pid)
                proc.cpu_percent(None)  # the first read only starts the measurement
            with proc.oneshot():
                return ProcStats(
                    cpu_percent=round(proc.cpu_percent(None), 1), rss_bytes=proc.memory_info().rss
                )
        except psutil.Error:  # gone, or another user's /proc entry we may not read
            self._procs.pop(pid, None)
            return ProcStats()

    def _forget(self, pids: set[int], task_ids: set[str]) -> None:
        for pid in set(self._procs) - pids:
            del self._procs[pid]
        for task_id in set(self._last) - task_ids:
            self._last.pop(task_id, None)
            self._seq.pop(task_id, None)


def render(snapshot: Snapshot, width: int) -> Group:
    """The screen, `width` cells wide: the daemon's health line, one tree per task (the columns
    that fit, `top_model.COLUMNS`), the totals."""
    health = Text(health_line(snapshot.daemon))
    footer = Text(footer_line(snapshot.totals), style="dim")
    if not snapshot.tasks:
        return Group(health, Text("no running tasks"), footer)
    rows = table_rows(snapshot)
    natural = [max(cells(row.cells[i]) for row in rows) for i in range(len(COLUMNS))]
    widths = fit(COLUMNS, natural, width)
    table = Table(box=None, header_style="bold", pad_edge=False, show_edge=False)
    for column, size in zip(COLUMNS, widths, strict=True):
        if size is not None:
            justify: JustifyMethod = "right" if column.right else "left"
            table.add_column(column.header, justify=justify, width=size, no_wrap=True, overflow="ellipsis")
    for row in rows:
        shown = [Text(cell) for cell, size in zip(row.cells, widths, strict=True) if size is not None]
        if row.root:
            shown[0].stylize("bold")
        table.add_row(*shown)
    return Group(health, table, footer)


@contextlib.contextmanager
def _keys(stream: TextIO) -> Iterator[int | None]:
    """The terminal in cbreak mode (keys arrive one at a time, Ctrl-C still interrupts); yields its
    fd, or None when stdin is not a terminal (then only Ctrl-C quits)."""
    if not stream.isatty():
        yield None
        return
    fd = stream.fileno()
    saved = termios.tcgetattr(fd)
    try:
        tty.setcbreak(fd)
        yield fd
    finally:
        termios.tcsetattr(fd, termios.TCSADRAIN, saved)


def _quit_within(fd: int | None, seconds: float) -> bool:
    """Wait up to `seconds` for a key; True when it is `q` (or `Q`)."""
    deadline = time.monotonic() + seconds
    while (left := deadline - time.monotonic()) > 0:
        if fd is None:
            time.sleep(left)
            return False
        ready, _, _ = select.select([fd], [], [], left)
        if ready:
            key = os.read(fd, 32)
            if b"q" in key.lower() or not key:
                return True
    return False


def run_live(collector: Collector, interval_s: float, console: Console) -> None:
    with _keys(sys.stdin) as fd, Live(console=console, auto_refresh=False, screen=True) as live:
        while True:
            live.update(render(collector.collect(), console.width), refresh=True)
            if _quit_within(fd, interval_s):
                return


def snapshot_json(collector: Collector) -> str:
    collector.collect()  # starts each process's CPU measurement
    time.sleep(JSON_SAMPLE_S)
    snapshot = collector.collect()
    return snapshot.model_dump_json()


def cmd_top(args: argparse.Namespace) -> int:
    try:
        path = resolve_socket(args.socket)
        with ApiClient(path, timeout_s=CALL_TIMEOUT_S) as client:
            collector = Collector(client, sort=args.sort)
            if args.json or not sys.stdout.isatty():
                sys.stdout.write(snapshot_json(collector) + "\n")
                return ExitCode.OK
            run_live(collector, args.interval, Console())
            return ExitCode.OK
    except ApiClientError as exc:
        sys.stderr.write(f"agentd top: {exc}\n")
        return ExitCode.FAILURE
    except KeyboardInterrupt:
        return ExitCode.OK  # Ctrl-C is how a live view is left
