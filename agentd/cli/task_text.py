"""Tasks as a person reads them (pure): the one-line summary a followed task ends with, what
`agentd status` shows (why the task ended among it), the columns of `agentd list`, what
`agentd cancel` did. Text a model, a tool or a person wrote goes through `display`."""

from __future__ import annotations

import datetime
import json
from collections.abc import Sequence
from typing import TYPE_CHECKING

from agentd.cli.columns import Column, render
from agentd.cli.display import human_age, one_line, plural, safe
from agentd.cli.outcome import ending_reason
from agentd.cli.task_ids import short_ids
from protocol.status import TerminalStatus

if TYPE_CHECKING:
    from agentd.cli.task_like import TaskLike

INSTRUCTION_CHARS = 300  # of the instruction `status` shows on its line (`--json` has it whole)
LABEL = 13  # `status`'s label column


def state_of(view: TaskLike) -> str:
    """The terminal status, or the state of a task that has not ended (a queued task a daily cap
    holds back is `deferred`)."""
    if view.status is not None:
        return view.status.value
    return "deferred" if view.state == "queued" and view.deferred is not None else view.state


def usage_text(view: TaskLike) -> str:
    usage = view.usage
    text = f"{plural(usage.steps, 'step')} · {plural(usage.tokens, 'token')}"
    return text + (f" · {cost_text(usage.cost_usd)}" if usage.cost_usd else "")


def cost_text(usd: float) -> str:
    """`$0.0450`: four decimals tell a cent's fraction, the scale of one model call."""
    return f"${usd:.4f}"


def describe(view: TaskLike) -> str:
    """One line: id, state (and exit code), usage — how a followed task ends."""
    exit_code = f" (exit {view.exit_code})" if view.exit_code is not None else ""
    return f"{view.task_id}  {state_of(view)}{exit_code}  {usage_text(view)}"


def _when(at: float, now: float) -> str:
    stamp = datetime.datetime.fromtimestamp(at, datetime.UTC).strftime("%Y-%m-%d %H:%M:%S UTC")
    return f"{stamp}, {human_age(now - at)} ago"


def _why(view: TaskLike) -> str | None:
    """Why a task ended, or why a live one waits; None when there is nothing to say."""
    if view.status is not None:
        return ending_reason(view, result_where="below")
    if view.state == "awaiting_approval":
        return f"a tool call waits for a person: `agentd approvals {view.task_id}` shows it"
    if view.throttled is not None:
        wait = view.throttled
        return (
            f"throttled: a model request has waited {wait.waiting_s:.1f} s for a slot of endpoint "
            f"{wait.endpoint!r} ({wait.blocked_by})"
        )
    if view.deferred is not None and view.state == "queued":
        until = datetime.datetime.fromtimestamp(view.deferred.until, datetime.UTC)
        return f"deferred until {until:%Y-%m-%d %H:%M} UTC: {one_line(view.deferred.reason)}"
    if view.error is not None:  # awaiting_budget: what ran out, and what to do
        return one_line(view.error.message)
    return None


def _origin(view: TaskLike) -> str | None:
    parts = []
    if view.forked_from is not None:
        parts.append(f"forked from {view.forked_from.task_id} step {view.forked_from.step}")
    if view.schedule_id:
        parts.append(f"schedule {view.schedule_id}")
    if view.trigger:
        parts.append(one_line(f"trigger {view.trigger} {view.uri or ''}".rstrip()))
    return "; ".join(parts) or None


def _timing(view: TaskLike, now: float) -> str | None:
    if view.started_at is None:
        return None
    if view.ended_at is not None:
        return f"ran {view.ended_at - view.started_at:.1f} s"
    return f"running for {human_age(now - view.started_at)}"


def _executor(view: TaskLike) -> str | None:
    """Where a task ran, when that is not this daemon's own host."""
    if view.executor in (None, "local"):
        return None
    return one_line(f"{view.executor} on {view.worker or '?'}")


def status_lines(view: TaskLike, *, now: float) -> list[str]:
    """What `agentd status` prints before the result: one `label  value` line each."""
    state = state_of(view)
    if view.exit_code is not None:
        state += f" (exit {view.exit_code})"
    elif view.pid is not None:
        state += f" (pid {view.pid})"
    model = one_line(view.model or "the daemon's default model")
    if view.mcp:
        model += " · MCP " + ", ".join(one_line(name) for name in view.mcp)
    instruction = one_line(view.instruction)
    if len(instruction) > INSTRUCTION_CHARS:
        instruction = instruction[: INSTRUCTION_CHARS - 1] + "…"
    usage = view.usage
    rows: list[tuple[str, str | None]] = [
        ("task", view.task_id),
        ("state", state),
        ("why", _why(view)),
        ("instruction", instruction),
        ("model", model),
        ("usage", f"{usage_text(view)} ({usage.tokens_in} in, {usage.tokens_out} out)"),
        ("submitted", _when(view.created_at, now) if view.created_at else None),
        ("time", _timing(view, now)),
        ("resumed", plural(view.resumes, "time") if view.resumes else None),
        ("origin", _origin(view)),
        ("executor", _executor(view)),
    ]
    return [f"{label:<{LABEL}}{value}" for label, value in rows if value is not None]


def result_text(view: TaskLike, *, terminal: bool) -> str | None:
    """The result as printed: JSON when structured, else the text itself, escaped for a
    `terminal` (a pipe gets it exact); None when there is none."""
    if view.result is None:
        return None
    if isinstance(view.result, str):
        text = safe(view.result) if terminal else view.result
        return text + ("" if text.endswith("\n") else "\n")
    return json.dumps(view.result, indent=2, ensure_ascii=False) + "\n"


LIST_COLUMNS = (
    Column("ID", keep=True),
    Column("AGE", rank=1, right=True),
    Column("STATE", keep=True),
    Column("MODEL", rank=0),
    Column("INSTRUCTION", shrink=True, rank=2),
)


def list_lines(views: Sequence[TaskLike], *, now: float, width: int) -> list[str]:
    """`agentd list`'s table: short id, age, state, model, the start of the instruction, fitted
    to `width` cells."""
    short = short_ids(v.task_id for v in views)
    rows = [
        (
            short[view.task_id],
            human_age(now - view.created_at),
            state_of(view),
            one_line(view.model or "-"),
            one_line(view.instruction),
        )
        for view in views
    ]
    return render(LIST_COLUMNS, rows, width)


def cancel_line(view: TaskLike) -> str:
    """What `agentd cancel` did, from the task as the daemon answered."""
    task_id = view.task_id
    if view.status is TerminalStatus.CANCELLED:
        return f"cancelled {task_id}"
    if view.status is not None:
        return f"{task_id} had already ended ({view.status.value}): nothing to cancel"
    return (
        f"cancelling {task_id}: it was {view.state}; its subagents are stopped within seconds "
        f"(`agentd status {task_id}` shows when it has ended)"
    )
