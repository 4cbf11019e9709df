"""The stderr line for a task's non-zero outcome: status, abort kind and error, on one line."""

from __future__ import annotations

import pytest

from agentd.cli.outcome import MAX_LINE_CHARS, outcome_line
from protocol.api import TaskView
from protocol.result import RunError, RunUsage
from protocol.result import TerminalStatus as S


def view(status: S | None, code: int | None, **fields: object) -> TaskView:
    base: dict[str, object] = {
        "task_id": "t_1",
        "run_id": "r_1",
        "owner_uid": 0,
        "state": "terminal" if status else "running",
        "status": status,
        "exit_code": code,
        "usage": RunUsage(steps=3, tokens_in=900, tokens_out=100),
    }
    return TaskView.model_validate(base | fields)


@pytest.mark.parametrize(
    ("task", "expected"),
    [
        pytest.param(
            view(S.EXHAUSTED_STEPS, 3, partial=True, result="so far"),
            "agentd run: task t_1 exhausted_steps (exit 3): the step budget ran out after 3 steps; "
            "the partial result is on stdout",
            id="3-steps",
        ),
        pytest.param(
            view(S.EXHAUSTED_TOKENS, 7),
            "agentd run: task t_1 exhausted_tokens (exit 7): the token budget ran out after 1000 tokens; "
            "no usable result",
            id="7-tokens",
        ),
        pytest.param(
            view(S.REFUSED, 5, result="it is\nimpossible"),
            "agentd run: task t_1 refused (exit 5): the model declined the task: it is impossible",
            id="5-refused",
        ),
        pytest.param(
            view(S.CRASHED, 4, abort="intelligence", error=RunError(kind="auth", message="HTTP 401")),
            "agentd run: task t_1 crashed, abort intelligence (exit 4): the model endpoint could not be "
            "used — auth: HTTP 401",
            id="4-intelligence",
        ),
        pytest.param(
            view(S.CRASHED, 6, abort="mcp", error=RunError(kind="mcp_down", message="fs: cannot start")),
            "agentd run: task t_1 crashed, abort mcp (exit 6): a required MCP server is down — mcp_down: "
            "fs: cannot start",
            id="6-mcp",
        ),
        pytest.param(
            view(S.DEADLINE, 124, started_at=10.0, ended_at=12.5),
            "agentd run: task t_1 deadline (exit 124): the deadline passed after 2.5 s; no usable result",
            id="124-deadline",
        ),
        pytest.param(
            view(S.STALLED, 1),
            "agentd run: task t_1 stalled (exit 1): several turns in a row made no progress; no usable result",
            id="1-stalled",
        ),
        pytest.param(
            view(S.LOOP_DETECTED, 3, partial=True),
            "agentd run: task t_1 loop_detected (exit 3): the model kept repeating the same tool call; "
            "the partial result is on stdout",
            id="3-loop",
        ),
        pytest.param(
            view(S.CANCELLED, 1, error=RunError(kind="cancelled", message="interrupted")),
            "agentd run: task t_1 cancelled (exit 1): the task was cancelled — cancelled: interrupted",
            id="1-cancelled",
        ),
        pytest.param(
            view(S.CRASHED, 1, error=RunError(kind="segfault", message="Fatal Python error\n  File x")),
            "agentd run: task t_1 crashed (exit 1): the subagent crashed — segfault: Fatal Python error File x",
            id="1-crashed",
        ),
        pytest.param(
            view(None, None),
            "agentd run: task t_1 is still running: the wait ended before the task did",
            id="not-terminal",
        ),
    ],
)
def test_every_non_zero_outcome_has_one_readable_line(task: TaskView, expected: str) -> None:
    assert outcome_line("run", task) == expected


def test_a_completed_task_prints_nothing() -> None:
    assert outcome_line("run", view(S.COMPLETED, 0)) is None


def test_the_line_stays_one_bounded_line_whatever_the_error() -> None:
    task = view(S.CRASHED, 1, error=RunError(kind="exit", message="line\n" * 700))
    line = outcome_line("submit", task)
    assert line is not None and "\n" not in line and len(line) <= MAX_LINE_CHARS
