"""The listing commands: `list` (a table fitted to the terminal), `schedules` (and one schedule
shown, paused, resumed or deleted) and `triggers`. An empty listing says so in words; `--json`
prints one exact JSON object per line (nothing when there is nothing)."""

from __future__ import annotations

import argparse
import datetime
import time
from typing import TextIO

from agentd.api.client import ApiClient
from agentd.cli import plain_commands
from agentd.cli.display import human_age, one_line, plural
from protocol.api import (
    ListParams,
    ScheduleDeleteRequest,
    ScheduleGetRequest,
    ScheduleListParams,
    ScheduleListRequest,
    SchedulePauseRequest,
    ScheduleRef,
    ScheduleResumeRequest,
    ScheduleView,
    TriggerListRequest,
    TriggerPauseRequest,
    TriggerRef,
    TriggerRestartRequest,
    TriggerResumeRequest,
    TriggerView,
)
from protocol.exit_codes import ExitCode

LABEL = 13  # `schedules show`'s label column
SCHEDULE_PAGE = 500  # schedules asked for at a time


def cmd_list(client: ApiClient, args: argparse.Namespace, out: TextIO) -> int:
    """Flags the plain path would not send: the models word what is wrong with them."""
    ListParams(
        state=args.state or None,
        limit=args.limit,
        before=args.before,
        schedule_id=getattr(args, "schedule", None),
        trigger=getattr(args, "trigger", None),
    )
    return plain_commands.cmd_list(client, args, out)


# ---- schedules ---------------------------------------------------------------------------------


def _utc(at: float | None) -> str:
    if at is None:
        return "-"
    return datetime.datetime.fromtimestamp(at, datetime.UTC).strftime("%Y-%m-%d %H:%M:%SZ")


def _expression(view: ScheduleView) -> str:
    trigger = view.trigger
    if trigger.kind == "cron":
        return f"{trigger.cron}" + (f" ({trigger.tz})" if trigger.tz else "")
    if trigger.kind == "interval":
        return f"every {trigger.every_s:g}s"
    pause = view.pause_s if view.pause_s is not None else trigger.interval_s
    return f"loop, pause {pause:g}s"


def _runs(view: ScheduleView) -> str:
    limit = view.trigger.max_runs
    return plural(view.runs, "run") + (f" of {limit}" if limit else "")


def describe_schedule(view: ScheduleView) -> str:
    """One line: id, kind, expression, next fire, last run and its status, state."""
    last = f"{view.last_task_id} {view.last_status.value if view.last_status else 'running'}"
    parts = [
        view.schedule_id,
        view.trigger.kind,
        repr(_expression(view)),
        f"next {_utc(view.next_fire_at)}",
        f"last {last if view.last_task_id else '-'}",
        _runs(view),
        f"{view.skipped} skipped",
        view.state + (f" ({one_line(view.note)})" if view.note else ""),
    ]
    if view.name:
        parts.insert(1, f"[{one_line(view.name)}]")
    return "  ".join(parts)


def schedule_lines(view: ScheduleView, *, now: float) -> list[str]:
    """What `agentd schedules show` prints: one `label  value` line each."""
    last = None
    if view.last_task_id:
        status = view.last_status.value if view.last_status else "running"
        when = f", {human_age(now - view.last_fire_at)} ago" if view.last_fire_at else ""
        last = f"{view.last_task_id} {status}{when}"
    rows: list[tuple[str, str | None]] = [
        ("schedule", view.schedule_id + (f" [{one_line(view.name)}]" if view.name else "")),
        ("state", view.state + (f" ({one_line(view.note)})" if view.note else "")),
        ("when", f"{view.trigger.kind}: {_expression(view)}"),
        ("next fire", _utc(view.next_fire_at) if view.next_fire_at is not None else "none"),
        ("instruction", one_line(view.instruction)),
        ("runs", f"{_runs(view)} · {view.failures} failed · {view.skipped} skipped"),
        ("tokens", f"{view.tokens_used}" + (f" of {cap}" if (cap := view.trigger.max_total_tokens) else "")),
        ("last run", last),
        ("last error", one_line(view.last_error) if view.last_error else None),
        ("created", _utc(view.created_at) if view.created_at else None),
        ("its tasks", f"agentd list --schedule {view.schedule_id}"),
    ]
    return [f"{label:<{LABEL}}{value}" for label, value in rows if value is not None]


def _done(action: str, view: ScheduleView) -> str:
    """What `schedules pause|resume|delete` did."""
    sid = view.schedule_id
    if action == "delete":
        return f"deleted schedule {sid}: it fires no more (a run under way goes on; its tasks stay listed)"
    if action == "pause":
        return f"paused schedule {sid}: no fires until `agentd schedules resume {sid}`"
    return f"resumed schedule {sid}: next fire {_utc(view.next_fire_at)}"


def _all_schedules(client: ApiClient) -> list[ScheduleView]:
    """Every schedule the caller may see, a page at a time (the daemon answers in pages)."""
    views: list[ScheduleView] = []
    while True:
        after = views[-1].schedule_id if views else None
        page = client.call(ScheduleListRequest(params=ScheduleListParams(limit=SCHEDULE_PAGE, after=after)))
        views.extend(page)
        if len(page) < SCHEDULE_PAGE:
            return views


def cmd_schedules(client: ApiClient, args: argparse.Namespace, out: TextIO) -> int:
    if args.action is None:
        views = _all_schedules(client)
        for view in views:
            out.write((view.model_dump_json() if args.json else describe_schedule(view)) + "\n")
        if not views and not args.json:
            out.write("no schedules (`agentd submit … --cron|--every|--loop` makes one)\n")
        return ExitCode.OK
    ref = ScheduleRef(schedule_id=args.schedule)
    request = {
        "show": ScheduleGetRequest,
        "pause": SchedulePauseRequest,
        "resume": ScheduleResumeRequest,
        "delete": ScheduleDeleteRequest,
    }[args.action](params=ref)
    view = client.call(request)
    if args.json:
        out.write(view.model_dump_json() + "\n")
    elif args.action == "show":
        out.write("\n".join(schedule_lines(view, now=time.time())) + "\n")
    else:
        out.write(_done(args.action, view) + "\n")
    return ExitCode.OK


# ---- triggers ----------------------------------------------------------------------------------

TRIGGER_COLUMNS = (
    "NAME",
    "SERVER",
    "URI/GLOB",
    "ROUTE",
    "STATE",
    "DELIVERIES",
    "TASKS",
    "LAST FIRED",
    "LAST ERROR",
)


def trigger_row(view: TriggerView) -> tuple[str, ...]:
    target = view.uri if view.uri is not None else f"{view.glob} ({plural(view.subscribed, 'URI')})"
    error = one_line(view.last_error or "-")[:80]
    return (
        view.name,
        view.server,
        one_line(target),
        view.route,
        view.state,
        str(view.deliveries),
        f"{view.tasks_started} ({view.inflight} unfinished)" if view.inflight else str(view.tasks_started),
        _utc(view.last_fired_at),
        error,
    )


def format_table(header: tuple[str, ...], rows: list[tuple[str, ...]]) -> str:
    widths = [max(len(cell) for cell in column) for column in zip(header, *rows, strict=True)]
    lines = [
        "  ".join(cell.ljust(w) for cell, w in zip(row, widths, strict=True)).rstrip()
        for row in [header, *rows]
    ]
    return "\n".join(lines)


def cmd_triggers(client: ApiClient, args: argparse.Namespace, out: TextIO) -> int:
    if args.action is None:
        views = client.call(TriggerListRequest())
        if args.json:
            for view in views:
                out.write(view.model_dump_json() + "\n")
        elif not views:
            out.write("no triggers configured ([[trigger]] tables; see docs/triggers.md)\n")
        else:
            out.write(format_table(TRIGGER_COLUMNS, [trigger_row(v) for v in views]) + "\n")
        return ExitCode.OK
    request = {
        "pause": TriggerPauseRequest,
        "resume": TriggerResumeRequest,
        "restart": TriggerRestartRequest,
    }[args.action](params=TriggerRef(name=args.name))
    view = client.call(request)
    out.write((view.model_dump_json() if args.json else f"{view.name}: {view.state}") + "\n")
    return ExitCode.OK
