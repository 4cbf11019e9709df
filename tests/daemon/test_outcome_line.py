"""`agentd submit --wait` and `--follow` print one readable line on stderr for a non-zero outcome,
while stdout keeps the result (or the JSON view)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.support.daemon import running_daemon, scripted

pytestmark = pytest.mark.processes


def stderr_lines(stderr: str) -> list[str]:
    return [line for line in stderr.splitlines() if line]


def test_submit_wait_and_follow_print_the_outcome_line_on_stderr(tmp_path: Path) -> None:
    body = (
        scripted("refuser", [{"refuse": "out of scope"}], tmp_path)
        + scripted("ok", [{"text": "all good"}], tmp_path)
        + '[defaults]\nmodel = "refuser"\n'
        + '[mcp.broken]\ncommand = ["/nonexistent/server"]\ntrust = []\nconnect_timeout_s = 2\n'
    )
    with running_daemon(tmp_path, body) as daemon:
        refused = daemon.cli("submit", "x", "--wait", "--json")
        assert refused.returncode == 5
        assert json.loads(refused.stdout)["status"] == "refused"  # stdout is still the JSON view
        (line,) = stderr_lines(refused.stderr)
        assert line.startswith("agentd submit: task t_")
        assert line.endswith("refused (exit 5): the model declined the task: out of scope")

        down = daemon.cli("submit", "x", "--mcp", "broken", "--model", "ok", "--wait")
        assert down.returncode == 6
        (line,) = stderr_lines(down.stderr)
        assert "crashed, abort mcp (exit 6): a required MCP server is down — mcp_down:" in line
        assert "broken" in line

        followed = daemon.cli("submit", "x", "--follow")
        assert followed.returncode == 5
        assert followed.stdout.splitlines()[0].startswith("task t_")  # the id, the events, the end
        (line,) = stderr_lines(followed.stderr)
        assert "refused (exit 5)" in line

        fine = daemon.cli("submit", "x", "--model", "ok", "--wait")
        assert (fine.returncode, fine.stdout, fine.stderr) == (0, "all good\n", "")
