"""The one human-readable line a command prints on stderr when a task ends with a non-zero code.

`agentd run`, `agentd submit --wait` and `--follow` keep stdout for results; a person (or a log
collector) reading stderr gets the status, the abort kind and the error message without parsing
JSON. Pure: a `TaskLike` in, a line (or None for exit 0) out.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from agentd.cli.display import one_line, plural
from protocol.status import TerminalStatus

if TYPE_CHECKING:
    from agentd.cli.task_like import TaskLike

MAX_LINE_CHARS = 600
MAX_DETAIL_CHARS = 300

_ABORTS = {
    "intelligence": "the model endpoint could not be used",
    "mcp": "a required MCP server is down",
}


def _one_line(text: str, limit: int = MAX_DETAIL_CHARS) -> str:
    flat = one_line(text)  # a model's or a server's words: escaped, on one line
    return flat if len(flat) <= limit else flat[: limit - 1] + "…"


def _partial(view: TaskLike, where: str) -> str:
    return f"; the partial result is {where}" if view.partial else "; no usable result"


def _what_happened(view: TaskLike, where: str) -> str:
    """Why the task ended, in words, for the statuses that carry no error of their own."""
    status = view.status
    usage = view.usage
    if status is TerminalStatus.REFUSED:
        reason = view.result if isinstance(view.result, str) and view.result else "no reason given"
        return f"the model declined the task: {_one_line(reason)}"
    if status is TerminalStatus.EXHAUSTED_STEPS:
        return f"the step budget ran out after {plural(usage.steps, 'step')}" + _partial(view, where)
    if status is TerminalStatus.EXHAUSTED_TOKENS:
        return f"the token budget ran out after {plural(usage.tokens, 'token')}" + _partial(view, where)
    if status is TerminalStatus.DEADLINE:
        took = ""
        if view.started_at is not None and view.ended_at is not None:
            took = f" after {view.ended_at - view.started_at:.1f} s"
        return f"the deadline passed{took}" + _partial(view, where)
    if status is TerminalStatus.STALLED:
        return "several turns in a row made no progress" + _partial(view, where)
    if status is TerminalStatus.LOOP_DETECTED:
        return "the model kept repeating the same tool call" + _partial(view, where)
    if status is TerminalStatus.CANCELLED:
        return "the task was cancelled"
    if status is TerminalStatus.CRASHED:
        return "the subagent crashed"
    return "the task did not complete"


def outcome_line(command: str, view: TaskLike) -> str | None:
    """`agentd run: task t_… exhausted_steps (exit 3): the step budget ran out …`, or None for 0.

    The status, the abort kind (if any) and the error's kind and message (if any), on one line.
    A task that is not terminal (a wait that ended first) says so.
    """
    if view.exit_code == 0 and view.status is not None:
        return None
    if view.status is None:
        line = (
            f"agentd {command}: task {view.task_id} is still {view.state}: the wait ended before the task did"
        )
        return _one_line(line, MAX_LINE_CHARS)
    label = view.status.value + (f", abort {view.abort}" if view.abort else "")
    head = f"agentd {command}: task {view.task_id} {label} (exit {view.exit_code})"
    return _one_line(f"{head}: {ending_reason(view)}", MAX_LINE_CHARS)


def ending_reason(view: TaskLike, *, result_where: str = "on stdout") -> str:
    """Why a terminal task ended, in words: the abort or what its status means, then its error's
    kind and message (`the deadline passed after 5.0 s; no usable result — deadline: …`).
    `result_where` says where a partial result is shown."""
    if view.abort is not None:
        detail = _ABORTS.get(view.abort, "aborted")
    elif view.status is TerminalStatus.COMPLETED:
        detail = "the model gave its answer"
    else:
        detail = _what_happened(view, result_where)
    if view.error is not None:
        detail += f" — {view.error.kind}: {_one_line(view.error.message)}"
    return detail
