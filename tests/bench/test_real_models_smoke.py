"""`bench/real_models.py` runs end to end against the fake model server, so it cannot rot: two of
its tasks through real `agentd run` processes, its table and its JSON."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from bench.real_models import outcome_of
from tests.support.fake_llm import Behaviour, FakeLLM, Recorded, Respond, chat, tool_call
from tests.support.leaks import wait_no_descendants

REPO = Path(__file__).resolve().parents[2]
BENCH = [sys.executable, "-m", "bench.real_models"]

pytestmark = pytest.mark.processes


def a_model_that_knows(request: Recorded) -> Behaviour:
    """Multiplies, and declines what it has no tool for (with `task_refuse`)."""
    body: Any = request.json
    asked = json.dumps(body["messages"])
    if "17 multiplied by 23" in asked:
        return chat("17 x 23 = 391")
    return chat(tool_calls=[tool_call("task_refuse", {"reason": "I have no tool that sends email."})])


@pytest.mark.parametrize("via", ["run", "daemon"])
def test_the_real_model_bench_runs_its_tasks_and_writes_pass_rates(tmp_path: Path, via: str) -> None:
    out = tmp_path / "real.json"
    with FakeLLM(default=Respond(a_model_that_knows)) as fake:
        done = subprocess.run(
            [
                *BENCH,
                "--intelligence",
                fake.base_url,
                "--model",
                "fake",
                "--tasks",
                "arithmetic,must_refuse",
                "--repeat",
                "1",
                "--deadline-s",
                "60",
                "--out",
                str(out),
                "--via",
                via,
                "--temperature",
                "0",
                "--logs",
                str(tmp_path / "logs"),
            ],
            cwd=REPO,
            capture_output=True,
            text=True,
            timeout=300,
        )
    assert done.returncode == 0, done.stderr[-3000:]
    assert not wait_no_descendants(timeout_s=10)
    results = json.loads(out.read_text())
    assert (results["via"], results["temperature"]) == (via, 0)
    assert all(r.json["temperature"] == 0 for r in fake.requests if isinstance(r.json, dict))
    assert results["pass_rate"] == 1.0
    assert set(results["tasks"]) == {"arithmetic", "must_refuse"}
    arithmetic = results["tasks"]["arithmetic"]
    assert arithmetic["pass_rate"] == 1.0 and arithmetic["mean_steps"] == 1
    assert arithmetic["runs"][0]["status"] == "completed" and arithmetic["mean_tokens"] > 0
    assert results["tasks"]["must_refuse"]["runs"][0]["status"] == "refused"
    assert "overall" in done.stdout and "100%" in done.stdout
    # Each run's log is kept at debug level with content, through `run` and through the daemon.
    log = (tmp_path / "logs" / "arithmetic-1.log").read_text()
    assert '"event": "intel.result"' in log and "17 x 23 = 391" in log


def test_an_unknown_task_is_a_usage_error_naming_the_flag() -> None:
    done = subprocess.run(
        [*BENCH, "--intelligence", "http://127.0.0.1:9/v1", "--model", "m", "--tasks", "arithmetic,juggling"],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 2
    assert "--tasks: unknown task juggling" in done.stderr


def test_a_run_without_a_final_event_keeps_the_commands_own_outcome_line() -> None:
    line = "agentd run: task t_1 crashed, abort mcp (exit 6): the server fs did not connect"
    outcome = outcome_of(6, "", '{"event": "loop.start"}\n' + line + "\n", 1.0)
    assert (outcome.status, outcome.error) == ("unknown", line)
    final = '{"event": "loop.final", "handle": "0", "status": "completed", "steps": 1}\n'
    assert outcome_of(0, "x", final + "agentd run: done\n", 1.0).error is None
