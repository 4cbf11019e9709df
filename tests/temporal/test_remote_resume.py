"""A task on Temporal workers resumes from its journaled steps when its worker is lost (e2e: a
real dev server, `agentd serve` as the front door, two `agentd worker` processes, subagents with
a nested child, and a real stdio MCP server that appends every call it runs to `calls.log`).

Each node's steps reach the task's workflow history before the subagent goes on, so the attempt
that follows a `kill -9` of the first worker, on the other one, replays them: no call whose result
was journaled runs again, the call that was in flight is not run again (it is not declared
idempotent), no completed model turn is asked again, and the nested child's usage counts.
"""

from __future__ import annotations

import json
import os
import signal
import sys
import time
from collections import Counter
from pathlib import Path

import pytest

from protocol.result import TerminalStatus as S
from tests.support.daemon import LEAN_SERVER, Daemon, running_daemon, scripted
from tests.support.temporal import running_worker, start_worker, temporal_server

pytestmark = [pytest.mark.processes, pytest.mark.timeout(300)]

# A recorded call, a nested child that records its own, a slow call (the kill lands while it
# runs: the other worker starts meanwhile), one more call, then the answer. Uninterrupted, the
# task takes 7 model steps: 5 of the root's and 2 of the child's.
STEPS = 7
TURNS: list[dict[str, object]] = [
    {"tool_calls": [{"name": "demo__record", "arguments": {"text": "{instruction}/R1"}}]},
    {"tool_calls": [{"name": "subagent_spawn", "arguments": {"instruction": "child of {instruction}"}}]},
    {
        "tool_calls": [
            {"name": "demo__slow_record", "arguments": {"text": "{instruction}/R2", "seconds": 8.0}}
        ]
    },
    {"tool_calls": [{"name": "demo__record", "arguments": {"text": "{instruction}/R3"}}]},
    {"text": "done: {last_tool_result}"},
]
ROLES = [
    {
        "match": "^child of",
        "turns": [
            {"tool_calls": [{"name": "demo__record", "arguments": {"text": "{instruction}/C1"}}]},
            {"text": "child done"},
        ],
    }
]


def _calls(tmp_path: Path, instruction: str) -> Counter[str]:
    log = tmp_path / "calls" / "calls.log"
    calls: Counter[str] = Counter()
    for line in log.read_text().splitlines() if log.exists() else []:
        for prefix in (f"{instruction}/", f"child of {instruction}/"):
            if line.startswith(prefix):
                calls[line.removeprefix(prefix)] += 1
    return calls


def _events(daemon: Daemon, task_id: str) -> list[dict[str, object]]:
    done = daemon.cli("logs", task_id, "--json")
    assert done.returncode == 0, done.stderr
    return [json.loads(line) for line in done.stdout.splitlines()]


def test_kill_9_of_a_worker_mid_task_resumes_it_from_its_journaled_steps_on_the_other_worker(
    tmp_path: Path,
) -> None:
    calls = tmp_path / "calls"
    calls.mkdir()
    with temporal_server(tmp_path) as server:
        body = (
            scripted("work", TURNS, tmp_path, roles=ROLES)
            + f'[mcp.demo]\ncommand = ["{sys.executable}", "{LEAN_SERVER}"]\ntrust = []\n'
            + f'env = {{ AGENTD_TEST_SENTINEL_DIR = "{calls}" }}\n'
            + '[defaults]\nmodel = "work"\nmcp = ["demo"]\n'
            + server.executor_toml(heartbeat_timeout_s='"2s"')
        )
        with running_daemon(tmp_path, body) as daemon:
            first = start_worker(tmp_path, daemon.config, "worker-a")
            try:
                task_id = daemon.submit("resumed")
                started = calls / "started-resumed_R2"
                deadline = time.monotonic() + 90
                while not started.exists():
                    assert time.monotonic() < deadline, "the slow call never started"
                    time.sleep(0.02)
                with running_worker(tmp_path, daemon.config, "worker-b") as second:
                    os.kill(first.proc.pid, signal.SIGKILL)
                    first.proc.wait(timeout=10)
                    view = daemon.wait(task_id, timeout_s=120)
                    assert view.status is S.COMPLETED, view
                    assert view.worker == second.identity
                    assert view.resumes == 1, view  # `agentd status` says it resumed
                    done = _calls(tmp_path, "resumed")
                    # R2 was in flight: its server may or may not have finished it, but it is
                    # not run again; nothing else ran twice.
                    assert done["R2"] <= 1, done
                    assert done - Counter({"R2": done["R2"]}) == Counter({"R1": 1, "C1": 1, "R3": 1})
                    # Nothing asked of the model again, and the child's steps counted.
                    assert view.usage.steps == STEPS, view.usage
                    events = _events(daemon, task_id)
                    attempts = [e["fields"] for e in events if e["event"] == "task.attempt"]
                    assert attempts == [
                        {"attempt": 1, "worker": first.identity},
                        {"attempt": 2, "worker": second.identity},
                    ]
                    resumed = [
                        e["fields"]
                        for e in events
                        if e["event"] == "task.resumed"
                        and isinstance(e["fields"], dict)
                        and "handle" not in e["fields"]
                    ]
                    assert len(resumed) == 1, resumed
                    assert isinstance(resumed[0], dict)
                    assert (resumed[0]["from_step"], resumed[0]["attempt"]) == (3, 2)
            finally:
                if first.proc.poll() is None:
                    first.proc.kill()
                    first.proc.wait()
