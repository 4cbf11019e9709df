"""Resume, not restart (docs/durability.md): a real daemon, real subagents, a nested child, and a
real stdio MCP server that appends every call it runs to `calls.log`.

Seeded rounds kill the daemon with SIGKILL at a step boundary or in the middle of a tool call,
start it again on the same state directory, and check that the task went on from its journaled
steps: it completes; no call whose result was journaled ran twice, and the one in flight is not
run again (it is not declared idempotent); no completed model turn was asked again (the task's
steps are exactly those of an uninterrupted run); the run says it resumed. A stop (SIGTERM)
parks a running task instead of cancelling it, and the next start resumes it; a tool declared
idempotent that was in flight runs again. `AGENTD_RESUME_SEED` replays the rounds.
"""

from __future__ import annotations

import os
import random
import signal
import sys
import time
from collections import Counter
from pathlib import Path

import pytest

from protocol.api import TaskView
from protocol.result import TerminalStatus
from tests.support.daemon import LEAN_SERVER, scripted, start_daemon, write_config
from tests.support.resume import (
    ROOT_TURNS,
    SLOW_S,
    WAIT_S,
    calls_of,
    restart_daemon,
    resume_config,
    stop_daemon,
    task_events,
    wait_for,
)

pytestmark = pytest.mark.processes

# Where a round's kill lands: once this line is in calls.log (the call ran; its result may or may
# not be journaled yet), or once the slow call started (it is in flight).
KILL_POINTS = ("R1", "R2", "started-R3", "C1", "R4")
ROUNDS = int(os.environ.get("AGENTD_RESUME_ROUNDS", "20"))


def _kill_point_reached(tmp_path: Path, instruction: str, point: str) -> bool:
    if point.startswith("started-"):
        return (tmp_path / "calls" / f"started-{instruction}_{point.removeprefix('started-')}").exists()
    return calls_of(tmp_path, instruction)[point] > 0


def _handle(event: dict[str, object]) -> object:
    fields = event["fields"]
    return fields.get("handle") if isinstance(fields, dict) else None


@pytest.mark.timeout(900)
def test_kill_9_rounds_resume_each_task_from_its_journal_without_running_a_call_twice(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    seed = int(os.environ.get("AGENTD_RESUME_SEED", random.randrange(2**32)))
    with capsys.disabled():
        print(f"\nresume rounds: AGENTD_RESUME_SEED={seed}", flush=True)
    rng = random.Random(seed)
    config = resume_config(tmp_path)
    daemon = start_daemon(tmp_path, config)
    resumed_from: Counter[int] = Counter()
    try:
        # An uninterrupted run: the steps and calls every resumed one must match.
        clean = daemon.submit("clean", retry={"max_attempts": 2})
        baseline = daemon.wait(clean, timeout_s=WAIT_S)
        assert baseline.status is TerminalStatus.COMPLETED, baseline
        assert calls_of(tmp_path, "clean") == Counter({"R1": 1, "R2": 1, "R3": 1, "C1": 1, "R4": 1})

        for round_no in range(ROUNDS):
            instruction = f"round-{round_no}"
            point = (
                KILL_POINTS[round_no % len(KILL_POINTS)]
                if round_no < len(KILL_POINTS)
                else rng.choice(KILL_POINTS)
            )
            task_id = daemon.submit(instruction, retry={"max_attempts": 2})
            wait_for(
                f"{point} of {instruction}",
                lambda: _kill_point_reached(tmp_path, instruction, point),  # noqa: B023
                daemon,
            )
            time.sleep(rng.uniform(0, 0.05))  # lands before or after the result is journaled
            daemon = restart_daemon(daemon, tmp_path, config, signal.SIGKILL)
            view = daemon.wait(task_id, timeout_s=WAIT_S)

            where = f"round {round_no} (kill after {point})"
            assert view.status is TerminalStatus.COMPLETED, (where, view)
            calls = calls_of(tmp_path, instruction)
            # No call ran twice: neither one whose result was journaled nor the one in flight.
            assert calls and max(calls.values()) == 1, (where, calls)
            # The same work as the uninterrupted run, nothing asked of the model again.
            assert view.usage.steps == baseline.usage.steps, (where, view.usage, baseline.usage)
            assert view.resumes == 1, (where, view)
            events = task_events(daemon, task_id)
            resumed = [e for e in events if e["event"] == "task.resumed" and _handle(e) is None]
            assert len(resumed) == 1, (where, resumed)
            fields = resumed[0]["fields"]
            assert isinstance(fields, dict)
            resumed_from[int(str(fields["from_step"]))] += 1
            asked = sum(1 for e in events if e["event"] == "intel.call" and _handle(e) == "0")
            # At most the one model call that was on the wire at the kill is asked again.
            assert asked <= len(ROOT_TURNS) + 1, (where, asked)
    finally:
        stop_daemon(daemon)
    with capsys.disabled():
        print(f"resume rounds: {ROUNDS} rounds, resumed from steps {dict(sorted(resumed_from.items()))}")
    assert len(resumed_from) >= 3  # the kills landed at several different steps


def test_a_stop_parks_a_running_task_and_the_next_start_resumes_it(tmp_path: Path) -> None:
    config = resume_config(tmp_path)
    daemon = start_daemon(tmp_path, config)
    try:
        task_id = daemon.submit("parked", retry={"max_attempts": 1})
        wait_for("the slow call", lambda: _kill_point_reached(tmp_path, "parked", "started-R3"), daemon)
        daemon = restart_daemon(daemon, tmp_path, config, signal.SIGTERM)
        view = daemon.wait(task_id, timeout_s=WAIT_S)
        # Not cancelled, and no attempt spent (max_attempts 1 would have ended it `crashed`).
        assert view.status is TerminalStatus.COMPLETED, view
        assert (view.attempts, view.resumes) == (0, 1)
        assert calls_of(tmp_path, "parked") == Counter({"R1": 1, "R2": 1, "R3": 1, "C1": 1, "R4": 1})
        events = [e["event"] for e in task_events(daemon, task_id)]
        assert events.index("task.parked") < events.index("task.resumed")
        transcript = daemon.cli("transcript", task_id)
        assert transcript.returncode == 0, transcript.stderr
        # The slow call was cut by the stop: the model was told so, and it was not run again.
        assert "interrupted: this call was running when the task was stopped" in transcript.stdout
        assert "demo__slow_record" in transcript.stdout
    finally:
        stop_daemon(daemon)


def test_an_in_flight_call_of_a_tool_declared_idempotent_runs_again_on_resume(tmp_path: Path) -> None:
    config = resume_config(tmp_path, idempotent='idempotent = ["slow_*"]\n')
    daemon = start_daemon(tmp_path, config)
    try:
        task_id = daemon.submit("again", retry={"max_attempts": 2})
        wait_for("the slow call", lambda: _kill_point_reached(tmp_path, "again", "started-R3"), daemon)
        daemon = restart_daemon(daemon, tmp_path, config, signal.SIGTERM)
        view = daemon.wait(task_id, timeout_s=WAIT_S)
        assert view.status is TerminalStatus.COMPLETED, view
        calls = calls_of(tmp_path, "again")
        assert calls["R3"] == 2, calls  # in flight at the stop, and safe to run twice
        assert (calls["R1"], calls["R2"], calls["R4"]) == (1, 1, 1), calls
    finally:
        stop_daemon(daemon)


def test_with_on_stop_cancel_a_stop_ends_running_tasks_cancelled(tmp_path: Path) -> None:
    config = resume_config(tmp_path)
    config.write_text(config.read_text().replace("[daemon]\n", '[daemon]\non_stop = "cancel"\n', 1))
    daemon = start_daemon(tmp_path, config)
    try:
        task_id = daemon.submit("cancelled", retry={"max_attempts": 2})
        wait_for("the slow call", lambda: _kill_point_reached(tmp_path, "cancelled", "started-R3"), daemon)
        daemon = restart_daemon(daemon, tmp_path, config, signal.SIGTERM)
        view: TaskView = daemon.wait(task_id, timeout_s=WAIT_S)
        assert view.status is TerminalStatus.CANCELLED, view
        assert view.resumes == 0
    finally:
        stop_daemon(daemon)


@pytest.mark.parametrize("max_attempts", [2, 1])
def test_a_crashed_subagent_goes_on_from_its_transcript_while_its_attempts_allow(
    tmp_path: Path, max_attempts: int
) -> None:
    config = resume_config(tmp_path)
    daemon = start_daemon(tmp_path, config)
    try:
        task_id = daemon.submit("crashed", retry={"max_attempts": max_attempts})
        wait_for("the slow call", lambda: _kill_point_reached(tmp_path, "crashed", "started-R3"), daemon)
        view = daemon.call("task.get", {"task_id": task_id})
        assert isinstance(view, dict) and isinstance(view["pid"], int)
        os.kill(view["pid"], signal.SIGKILL)  # from outside agentd: a crash, not a cancel
        ended = daemon.wait(task_id, timeout_s=WAIT_S)
        events = task_events(daemon, task_id)
        names = [e["event"] for e in events]
        if max_attempts == 1:
            assert ended.status is TerminalStatus.CRASHED, ended
            assert ended.error is not None and ended.error.kind == "killed"
            assert "task.requeued" not in names
            return
        assert ended.status is TerminalStatus.COMPLETED, ended
        assert (ended.attempts, ended.resumes) == (1, 1)
        # The in-flight call is not run again (not declared idempotent: its server may or may not
        # have finished it after the crash); nothing else ran twice.
        calls = calls_of(tmp_path, "crashed")
        assert calls["R3"] <= 1, calls
        assert calls - Counter({"R3": calls["R3"]}) == Counter({"R1": 1, "R2": 1, "C1": 1, "R4": 1})
        (requeued,) = [e for e in events if e["event"] == "task.requeued"]
        assert isinstance(requeued["fields"], dict)
        assert (requeued["fields"]["attempt"], requeued["fields"]["err"]) == (2, "killed")
        assert names.index("task.requeued") < names.index("task.resumed")
    finally:
        stop_daemon(daemon)


def test_a_run_whose_transcript_was_cut_to_digests_resumes_from_them(tmp_path: Path) -> None:
    calls = tmp_path / "calls"
    calls.mkdir()
    big = "b" * 3000
    turns: list[dict[str, object]] = [
        {"tool_calls": [{"name": "demo__echo", "arguments": {"text": f"first {big}"}}]},
        {"tool_calls": [{"name": "demo__echo", "arguments": {"text": f"second {big}"}}]},
        {
            "tool_calls": [
                {"name": "demo__slow_record", "arguments": {"text": "{instruction}/R1", "seconds": SLOW_S}}
            ]
        },
        {"tool_calls": [{"name": "demo__record", "arguments": {"text": "{instruction}/R2"}}]},
        {"text": "done: {last_tool_result}"},
    ]
    body = (
        scripted("work", turns, tmp_path)
        + f'[mcp.demo]\ncommand = ["{sys.executable}", "{LEAN_SERVER}"]\ntrust = []\n'
        + f'env = {{ AGENTD_TEST_SENTINEL_DIR = "{calls}" }}\n'
        + '[defaults]\nmodel = "work"\nmcp = ["demo"]\n'
        + "[journal]\nmax_transcript_bytes = 4096\n"
    )
    daemon = start_daemon(tmp_path, write_config(tmp_path, body))
    try:
        task_id = daemon.submit("digested", retry={"max_attempts": 2})
        wait_for("the slow call", lambda: _kill_point_reached(tmp_path, "digested", "started-R1"), daemon)
        view = daemon.call("task.get", {"task_id": task_id})
        assert isinstance(view, dict) and isinstance(view["pid"], int)
        os.kill(view["pid"], signal.SIGKILL)
        ended = daemon.wait(task_id, timeout_s=WAIT_S)
        assert ended.status is TerminalStatus.COMPLETED, ended
        assert ended.resumes == 1
        assert calls_of(tmp_path, "digested")["R2"] == 1
        transcript = daemon.cli("transcript", task_id, "--full")
        assert transcript.returncode == 0, transcript.stderr
        # The oldest echo's body gave way to its digest; the run went on from it regardless.
        assert "[not kept: a " in transcript.stdout
        assert "this task's transcript is over [journal] max_transcript_bytes" in transcript.stdout
    finally:
        stop_daemon(daemon)
