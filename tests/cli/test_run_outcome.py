"""`agentd run` prints one readable line on stderr for every non-zero exit code; stdout keeps the result."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest

from tests.support.run_cli import run, script

pytestmark = pytest.mark.processes

NOTE_READ = {"name": "note_read", "arguments": {}}


def outcome(stderr: str) -> str:
    """The one line on stderr that is not a JSON log line."""
    lines = [line for line in stderr.splitlines() if line and not line.startswith("{")]
    assert len(lines) == 1, stderr[-3000:]
    return lines[0]


@pytest.mark.parametrize(
    ("turns", "flags", "code", "pattern"),
    [
        pytest.param(
            [{"malformed": "garbage"}], [], 1, r"stalled \(exit 1\): several turns .*no usable result", id="1"
        ),
        pytest.param(
            [{"text": "interim notes", "tool_calls": [NOTE_READ]}],
            ["--max-steps", "2"],
            3,
            r"exhausted_steps \(exit 3\): the step budget ran out after 2 steps; the partial result",
            id="3",
        ),
        pytest.param(
            [{"fail": "unavailable"}],
            [],
            4,
            r"crashed, abort intelligence \(exit 4\): the model endpoint could not be used — unavailable: ",
            id="4",
        ),
        pytest.param(
            [{"refuse": "cannot do"}], [], 5, r"refused \(exit 5\): the model declined the task: ", id="5"
        ),
        pytest.param(
            [{"text": "x"}],
            ["--mcp", "broken=/nonexistent/server"],
            6,
            r"crashed, abort mcp \(exit 6\): a required MCP server is down — mcp_down: .*broken",
            id="6",
        ),
        pytest.param(
            [{"tool_calls": [NOTE_READ]}],
            ["--max-steps", "2"],
            7,
            r"exhausted_steps \(exit 7\): the step budget ran out after 2 steps; no usable result",
            id="7",
        ),
        pytest.param(
            [{"text": "slow", "delay_s": 30}],
            ["--deadline", "1s"],
            124,
            r"deadline \(exit 124\): the deadline passed",
            id="124",
        ),
    ],
)
def test_each_non_zero_exit_code_prints_one_stderr_line(
    tmp_path: Path, turns: list[dict[str, Any]], flags: list[str], code: int, pattern: str
) -> None:
    done = run("x", "--intelligence", script(tmp_path, turns), *flags)
    assert done.returncode == code, done.stderr[-2000:]
    line = outcome(done.stderr)
    assert line.startswith("agentd run: task t_"), line
    assert re.search(pattern, line), line
    if code == 3:
        assert done.stdout == "interim notes\n"  # the result stays on stdout


def test_a_completed_run_prints_no_outcome_line(tmp_path: Path) -> None:
    done = run("x", "--intelligence", script(tmp_path, [{"text": "fine"}]))
    assert done.returncode == 0
    assert [line for line in done.stderr.splitlines() if not line.startswith("{")] == []
    assert done.stdout == "fine\n"


def test_the_usage_error_line_is_unchanged(tmp_path: Path) -> None:
    done = run("x", "--deadline", "soon")
    assert done.returncode == 2 and done.stderr == "agentd run: --deadline: " + done.stderr.split(": ", 2)[2]
    assert "task t_" not in done.stderr  # no task was started, so no outcome line
