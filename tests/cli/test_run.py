"""`agentd run`: one task through an embedded supervisor, result on stdout, the task's exit code."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from tests.support.run_cli import BASIC, REPO, log_events, run, script

pytestmark = pytest.mark.processes


def test_a_task_with_an_mcp_server_prints_its_result_and_exits_0(tmp_path: Path) -> None:
    turns = [
        {"tool_calls": [{"name": "demo__add", "arguments": {"a": 40, "b": 2}}]},
        {"text": "= {last_tool_result}"},
    ]
    done = run("add", "--intelligence", script(tmp_path, turns), "--mcp", f"demo={sys.executable} {BASIC}")
    assert done.returncode == 0, done.stderr
    assert done.stdout == "= 42\n"
    events = {e["event"] for e in log_events(done.stderr)}
    assert {"task.started", "subagent.ready", "mcp.connect", "loop.final", "task.terminal"} <= events


@pytest.mark.parametrize(
    ("turns", "flags", "code"),
    [
        pytest.param([{"refuse": "no"}], [], 5, id="refused-5"),
        pytest.param([{"text": "slow", "delay_s": 30}], ["--deadline", "1s"], 124, id="deadline-124"),
        pytest.param([{"fail": "unavailable"}], [], 4, id="intelligence-4"),
        pytest.param(
            [{"tool_calls": [{"name": "note_read", "arguments": {}}]}],
            ["--max-steps", "2"],
            7,
            id="budget-without-partial-7",
        ),
    ],
)
def test_the_exit_code_is_the_tasks(
    tmp_path: Path, turns: list[dict[str, Any]], flags: list[str], code: int
) -> None:
    done = run("x", "--intelligence", script(tmp_path, turns), *flags)
    assert done.returncode == code, done.stderr[-2000:]


def test_a_json_contract_prints_json(tmp_path: Path) -> None:
    schema = tmp_path / "schema.json"
    schema.write_text(json.dumps({"type": "object", "required": ["n"]}))
    done = run(
        "x", "--intelligence", script(tmp_path, [{"text": '{"n": 7}'}]), "--output-schema", str(schema)
    )
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout) == {"n": 7}


@pytest.mark.parametrize(
    "args",
    [
        pytest.param(["--intelligence", "ftp://nope"], id="bad-intelligence"),
        pytest.param(["--deadline", "soon"], id="bad-deadline"),
        pytest.param(["--mcp", "ghost"], id="unknown-mcp-name"),
        pytest.param(["--mcp", "bad=sh -c 'unterminated"], id="unsplittable-command"),
        pytest.param(["--intelligence", "scripted:/nonexistent/script.json"], id="missing-script"),
        pytest.param(["--output-schema", "/nonexistent.json"], id="missing-schema"),
        pytest.param(["--max-steps", "0"], id="zero-steps"),
    ],
)
def test_a_usage_error_exits_2_at_once_without_starting_anything(args: list[str]) -> None:
    done = run("x", *args)
    assert done.returncode == 2, done.stderr
    assert done.stderr.startswith("agentd run:")
    # One line and no log event: refused before a supervisor, a child or a log was started.
    assert done.stderr.count("\n") == 1 and log_events(done.stderr) == [], done.stderr


def test_content_is_logged_only_with_log_content(tmp_path: Path) -> None:
    intel = script(tmp_path, [{"text": "ok"}])
    quiet = run("the secret plan", "--intelligence", intel)
    loud = run("the secret plan", "--intelligence", intel, "--log-content")
    assert "the secret plan" not in quiet.stderr
    start = next(e for e in log_events(quiet.stderr) if e["event"] == "loop.start")
    assert start["instruction_len"] == len("the secret plan")
    assert "the secret plan" in loud.stderr


def test_ctrl_c_cancels_the_task_and_exits_1(tmp_path: Path) -> None:
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "agentd",
            "run",
            "x",
            "--intelligence",
            script(tmp_path, [{"text": "z", "delay_s": 60}]),
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        cwd=REPO,
    )
    assert proc.stderr is not None
    for line in proc.stderr:  # wait until the child's loop runs (its model call takes 60 s)
        if '"loop.start"' in line:
            break
    proc.send_signal(signal.SIGINT)
    _, err = proc.communicate(timeout=30)
    assert proc.returncode == 1
    assert '"status": "cancelled"' in err
