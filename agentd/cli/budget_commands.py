"""`agentd budgets`: today's spend against each daily cap, and the tasks the caps defer
(docs/budgets.md, "Daily caps"). A user sees their own; an admin everyone's."""

from __future__ import annotations

import argparse
import datetime
from typing import TextIO

from agentd.api.client import ApiClient
from agentd.cli.listing_commands import format_table
from agentd.cli.task_text import cost_text
from protocol.api import BudgetLine, BudgetsRequest, BudgetsView, DeferredTaskView
from protocol.exit_codes import ExitCode

CAP_COLUMNS = ("SCOPE", "DAY", "SPENT", "CAP", "TOKENS", "TOKEN CAP", "RESETS")
DEFERRED_COLUMNS = ("TASK", "UID", "FROM", "UNTIL", "WHY")


def _utc(at: float) -> str:
    return datetime.datetime.fromtimestamp(at, datetime.UTC).strftime("%Y-%m-%d %H:%M UTC")


def _scope(line: BudgetLine) -> str:
    return f"{line.kind} {line.name}"


def cap_row(line: BudgetLine) -> tuple[str, ...]:
    day = line.day if line.zone == "UTC" else f"{line.day} ({line.zone})"
    return (
        _scope(line),
        day,
        cost_text(line.spent_usd),
        cost_text(line.cap_usd) if line.cap_usd is not None else "-",
        f"{line.spent_tokens:,}",
        f"{line.cap_tokens:,}" if line.cap_tokens is not None else "-",
        _utc(line.resets_at),
    )


def deferred_row(task: DeferredTaskView) -> tuple[str, ...]:
    origin = (
        f"trigger {task.trigger}"
        if task.trigger
        else f"schedule {task.schedule_id}"
        if task.schedule_id
        else "submit"
    )
    return (task.task_id, str(task.owner_uid), origin, _utc(task.until), task.reason)


def budgets_text(view: BudgetsView) -> str:
    """The caps' table, then the deferred tasks' (or a sentence saying there are none)."""
    parts = []
    if view.lines:
        parts.append(format_table(CAP_COLUMNS, [cap_row(line) for line in view.lines]))
    else:
        parts.append('no spend today and no daily caps (see docs/budgets.md, "Daily caps")')
    if view.deferred:
        parts.append("deferred until a cap's next day:")
        parts.append(format_table(DEFERRED_COLUMNS, [deferred_row(task) for task in view.deferred]))
    else:
        parts.append("no task is deferred")
    return "\n".join(parts) + "\n"


def cmd_budgets(client: ApiClient, args: argparse.Namespace, out: TextIO) -> int:
    view = client.call(BudgetsRequest())
    out.write(view.model_dump_json() + "\n" if args.json else budgets_text(view))
    return ExitCode.OK
