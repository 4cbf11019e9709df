"""The real daemon end to end: submit, outcomes, exit codes, cancel, idempotency, logs and tree."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from agentd.errors import ApiClientError
from protocol.api import IDEMPOTENCY_CONFLICT, SubmitParams, SubmitRequest, TaskSpec
from protocol.result import TerminalStatus as S
from tests.support.daemon import lean_mcp, running_daemon, scripted
from tests.support.fake_llm import FakeLLM, Hang

pytestmark = pytest.mark.processes

ADD_TURNS: list[dict[str, object]] = [
    {"tool_calls": [{"name": "demo__add", "arguments": {"a": 20, "b": 22}}]},
    {"text": "The answer is {last_tool_result}."},
]


def test_a_submitted_task_runs_to_completed_with_its_events_and_tree(tmp_path: Path) -> None:
    body = (
        scripted("adder", ADD_TURNS, tmp_path) + lean_mcp() + '[defaults]\nmodel = "adder"\nmcp = ["demo"]\n'
    )
    with running_daemon(tmp_path, body) as daemon:
        task_id = daemon.submit("add 20 and 22")
        view = daemon.wait(task_id)
        assert view.status is S.COMPLETED
        assert view.result == "The answer is 42."
        assert view.exit_code == 0
        assert view.usage.steps == 2
        logs = daemon.cli("logs", task_id, "--json")
        events = [json.loads(line)["event"] for line in logs.stdout.splitlines()]
        assert events[0] == "subagent.ready"
        assert {"loop.start", "tool.call", "tool.result", "loop.final", "subagent.exit"} <= set(events)
        tree = daemon.call("task.tree", {"task_id": task_id})
        assert isinstance(tree, list)
        assert len(tree) == 1
        node = tree[0]
        assert isinstance(node, dict)
        assert node["handle"] == "0"
        assert node["status"] == "completed"
        assert node["grant_steps"] == 40
        log_events = {line["event"] for line in daemon.log()}
        assert {"proc.start", "proc.ready", "task.submitted", "task.started", "task.terminal"} <= log_events


@pytest.mark.parametrize(
    ("turns", "limits", "status", "code"),
    [
        pytest.param([{"text": "done"}], {}, "completed", 0, id="completed-0"),
        pytest.param([{"refuse": "no"}], {}, "refused", 5, id="refused-5"),
        pytest.param(
            [{"tool_calls": [{"name": "note_read", "arguments": {}}]}],
            {"max_steps": "2"},
            "exhausted_steps",
            7,
            id="exhausted-without-partial-7",
        ),
        pytest.param(
            [{"text": "thinking", "tool_calls": [{"name": "note_read", "arguments": {}}]}],
            {"max_steps": "2"},
            "exhausted_steps",
            3,
            id="exhausted-with-partial-3",
        ),
        pytest.param(
            [{"text": "slow", "delay_s": 30}], {"deadline": "1s"}, "deadline", 124, id="deadline-124"
        ),
        pytest.param([{"fail": "auth"}], {}, "crashed", 4, id="intelligence-abort-4"),
    ],
)
def test_submit_wait_exits_with_the_tasks_code(
    tmp_path: Path, turns: list[dict[str, object]], limits: dict[str, str], status: str, code: int
) -> None:
    body = scripted("m", turns, tmp_path, after_end="repeat_last") + '[defaults]\nmodel = "m"\n'
    flags = [f"--{k.replace('_', '-')}={v}" for k, v in limits.items()]
    with running_daemon(tmp_path, body) as daemon:
        done = daemon.cli("submit", "the task", "--wait", "--json", *flags)
        assert done.returncode == code, done.stderr
        view = json.loads(done.stdout)
        assert view["status"] == status


def test_a_required_mcp_server_that_is_down_exits_6(tmp_path: Path) -> None:
    body = (
        scripted("m", [{"text": "x"}], tmp_path)
        + '[defaults]\nmodel = "m"\n'
        + '[mcp.broken]\ncommand = ["/nonexistent/server"]\ntrust = []\nconnect_timeout_s = 2\n'
    )
    with running_daemon(tmp_path, body) as daemon:
        done = daemon.cli("submit", "x", "--mcp", "broken", "--wait", "--json")
        assert done.returncode == 6, done.stderr
        assert json.loads(done.stdout)["abort"] == "mcp"


def test_cancel_during_a_model_call_ends_the_task_as_cancelled(tmp_path: Path) -> None:
    with FakeLLM(default=Hang()) as fake:
        body = (
            f'[intelligence.slow]\nkind = "openai"\nbase_url = "{fake.base_url}"\nmodel = "m"\n'
            '[defaults]\nmodel = "slow"\n'
        )
        with running_daemon(tmp_path, body) as daemon:
            task_id = daemon.submit("wait for a model that never answers")
            fake.wait_requests_blocking(1, timeout_s=30)
            cancelled = daemon.cli("cancel", task_id, "--json")
            assert cancelled.returncode == 0, cancelled.stderr
            view = daemon.wait(task_id, timeout_s=15)
            assert view.status is S.CANCELLED
            assert view.exit_code == 1
            fake.wait_aborted_blocking(1, timeout_s=10)


def test_an_idempotency_key_returns_the_same_task(tmp_path: Path) -> None:
    body = scripted("m", [{"text": "once"}], tmp_path) + '[defaults]\nmodel = "m"\n'
    with running_daemon(tmp_path, body) as daemon:
        first = daemon.cli("submit", "x", "--idempotency-key", "job-1", "--json")
        second = daemon.cli("submit", "x", "--idempotency-key", "job-1", "--json")
        a, b = json.loads(first.stdout), json.loads(second.stdout)
        assert a["task_id"] == b["task_id"]
        assert (a["created"], b["created"]) == (True, False)
        listed = daemon.cli("list", "--json")
        assert len(listed.stdout.splitlines()) == 1


def test_an_idempotency_key_reused_for_another_spec_is_refused_naming_the_key(tmp_path: Path) -> None:
    body = scripted("m", [{"text": "once"}], tmp_path) + '[defaults]\nmodel = "m"\n'
    with running_daemon(tmp_path, body) as daemon:
        first = json.loads(daemon.cli("submit", "x", "--idempotency-key", "job-1", "--json").stdout)
        other = daemon.cli("submit", "y", "--idempotency-key", "job-1", "--json")
        assert other.returncode == 2
        assert f"idempotency key 'job-1' was already used for task {first['task_id']}" in other.stderr
        request = SubmitRequest(params=SubmitParams(spec=TaskSpec(instruction="y"), idempotency_key="job-1"))
        with daemon.client() as client, pytest.raises(ApiClientError) as caught:
            client.call(request)
        assert caught.value.code == IDEMPOTENCY_CONFLICT
        assert not caught.value.retryable
        # The same spec under the key still answers with the original task.
        same = json.loads(daemon.cli("submit", "x", "--idempotency-key", "job-1", "--json").stdout)
        assert (same["task_id"], same["created"]) == (first["task_id"], False)
        assert len(daemon.cli("list", "--json").stdout.splitlines()) == 1


def test_a_spec_naming_an_unknown_model_is_refused_with_exit_2(tmp_path: Path) -> None:
    body = scripted("m", [{"text": "x"}], tmp_path) + '[defaults]\nmodel = "m"\n'
    with running_daemon(tmp_path, body) as daemon:
        done = daemon.cli("submit", "x", "--model", "nope")
        assert done.returncode == 2
        assert "nope" in done.stderr
        assert "m" in done.stderr


def test_submit_follow_json_prints_the_submit_then_json_event_lines_then_the_task(tmp_path: Path) -> None:
    body = (
        scripted("adder", ADD_TURNS, tmp_path) + lean_mcp() + '[defaults]\nmodel = "adder"\nmcp = ["demo"]\n'
    )
    with running_daemon(tmp_path, body) as daemon:
        done = daemon.cli("submit", "add", "--follow", "--json")
        assert done.returncode == 0, done.stderr
        lines = [json.loads(line) for line in done.stdout.splitlines()]
        assert lines[0]["task_id"] == lines[-1]["task_id"]
        assert "loop.final" in {e.get("event") for e in lines[1:-1]}
        assert lines[-1]["result"] == "The answer is 42."
