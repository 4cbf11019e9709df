"""Reading and forking a task's journaled transcript against a real daemon (docs/durability.md):
`agentd transcript` shows every model reply, tool call and result and no secret; `agentd fork`
starts a new task that replays the first N steps (nothing asked or run again) and runs the rest;
another uid gets NOT_FOUND for both, exactly as for a missing task."""

from __future__ import annotations

import json
import sys
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

from protocol.api import (
    NOT_FOUND,
    ForkParams,
    ForkRequest,
    Request,
    TranscriptParams,
    TranscriptRequest,
    TranscriptStep,
)
from protocol.result import TerminalStatus
from tests.support.as_user import NOGROUP, fork_as_nobody, outcomes
from tests.support.daemon import LEAN_SERVER, Daemon, running_daemon, scripted
from tests.support.privilege import AS_ANOTHER_USER
from tests.support.resume import ROLES, ROOT_TURNS, WAIT_S, calls_of

pytestmark = pytest.mark.processes

SECRET = "s3cr3t-token-value"


def _body(tmp_path: Path) -> str:
    calls = tmp_path / "calls"
    calls.mkdir(exist_ok=True)
    return (
        scripted("work", ROOT_TURNS, tmp_path, roles=ROLES)
        + f'[mcp.demo]\ncommand = ["{sys.executable}", "{LEAN_SERVER}"]\ntrust = []\n'
        + f'env = {{ AGENTD_TEST_SENTINEL_DIR = "{calls}", DEMO_TOKEN = "{SECRET}" }}\n'
        + '[defaults]\nmodel = "work"\nmcp = ["demo"]\n'
    )


def _completed(daemon: Daemon, instruction: str) -> str:
    task_id = daemon.submit(instruction)
    view = daemon.wait(task_id, timeout_s=WAIT_S)
    assert view.status is TerminalStatus.COMPLETED, view
    return task_id


def test_the_transcript_shows_every_reply_call_and_result_and_holds_no_secret(tmp_path: Path) -> None:
    with running_daemon(tmp_path, _body(tmp_path)) as daemon:
        task_id = _completed(daemon, "shown")
        human = daemon.cli("transcript", task_id)
        assert human.returncode == 0, human.stderr
        text = human.stdout
        assert text.startswith(f"task {task_id}  node 0  terminal (nodes with a transcript: 0, 0.1)\n")
        assert "instruction:\n    shown\n" in text
        assert '→ demo__record {"text": "shown/R1"}' in text
        assert "← demo__record ok\n    recorded shown/R1" in text
        assert '→ subagent_spawn {"instruction": "child of shown"}' in text
        assert "done: recorded shown/R4" in text

        raw = daemon.cli("transcript", task_id, "--json")
        steps = [TranscriptStep.model_validate_json(line) for line in raw.stdout.splitlines()]
        assert [s.seq for s in steps] == list(range(1, len(steps) + 1))
        kinds = Counter(s.item.kind for s in steps)
        assert kinds == Counter({"reply": 6, "start": 5, "result": 5})
        child = daemon.cli("transcript", task_id, "--node", "0.1", "--json")
        child_kinds = [json.loads(line)["item"]["kind"] for line in child.stdout.splitlines()]
        assert child_kinds == ["spawned", "reply", "start", "result", "reply"]

        # Keys and tokens never enter a transcript: not the page, not the journal's file.
        assert SECRET not in raw.stdout + child.stdout
        assert SECRET.encode() not in (tmp_path / "state" / "agentd.db").read_bytes()


def test_fork_from_step_2_replays_them_and_runs_the_rest(tmp_path: Path) -> None:
    with running_daemon(tmp_path, _body(tmp_path)) as daemon:
        original = _completed(daemon, "forked")
        done = daemon.cli("fork", original, "--from-step", "2", "--json")
        assert done.returncode == 0, done.stderr
        fork = json.loads(done.stdout)["task_id"]
        view = daemon.wait(fork, timeout_s=WAIT_S)
        first = daemon.wait(original, timeout_s=WAIT_S)
        assert view.status is TerminalStatus.COMPLETED, view
        # Steps 1-2 (R1, R2) were replayed, not run again; the rest ran a second time.
        assert calls_of(tmp_path, "forked") == Counter({"R1": 1, "R2": 1, "R3": 2, "C1": 2, "R4": 2})
        assert view.usage.steps == first.usage.steps
        assert view.forked_from is not None
        assert (view.forked_from.task_id, view.forked_from.step) == (original, 2)
        status = daemon.cli("status", fork)
        assert f"forked from {original} step 2" in status.stdout

        too_far = daemon.cli("fork", original, "--from-step", "99")
        assert too_far.returncode == 2
        assert too_far.stderr == (
            f"agentd fork: task {original!r} has 6 journaled steps; --from-step must be at most 6\n"
        )


def _other_uid(task_id: str, path: str) -> dict[str, Any]:
    steps: list[tuple[str, Request[Any]]] = [
        ("transcript", TranscriptRequest(params=TranscriptParams(task_id=task_id))),
        ("fork", ForkRequest(params=ForkParams(task_id=task_id, from_step=1))),
    ]
    return outcomes(path, steps)


@AS_ANOTHER_USER
def test_another_uid_gets_not_found_for_transcript_and_fork(tmp_path: Path) -> None:
    tmp_path.chmod(0o755)
    with running_daemon(tmp_path, _body(tmp_path), daemon_lines=f'socket_group = "{NOGROUP}"\n') as daemon:
        task_id = _completed(daemon, "private")
        seen = fork_as_nobody(tmp_path, task_id, "agentd.sock", [], _other_uid)
        missing = {"code": NOT_FOUND, "message": f"no task {task_id!r}"}
        assert seen == {"transcript": missing, "fork": missing}
