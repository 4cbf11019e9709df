"""Tasks run on Temporal workers through the front door (e2e: a real dev server, `agentd serve`
with `[executor] kind = "temporal"`, `agentd worker` processes, subagents and a stdio MCP server)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import psutil
import pytest

from agentd.errors import ApiClientError
from protocol.api import UNAVAILABLE, SubmitParams, SubmitRequest, TaskSpec
from protocol.result import TerminalStatus as S
from tests.support.daemon import (
    FakeNotifySocket,
    lean_mcp,
    refused_start,
    running_daemon,
    scripted,
    start_daemon,
    write_config,
)
from tests.support.fake_llm import FakeLLM, Hang, chat
from tests.support.temporal import Worker, free_port, running_worker, start_worker, temporal_server

# A dev server, a front door, one or two workers and their subagents each: a loaded machine can
# take longer than the suite's default 120 s to start them all.
pytestmark = [pytest.mark.processes, pytest.mark.timeout(300)]

ADD_TURNS: list[dict[str, object]] = [
    {"tool_calls": [{"name": "demo__add", "arguments": {"a": 20, "b": 22}}]},
    {"text": "The answer is {last_tool_result}."},
]


def test_a_task_submitted_to_the_front_door_completes_on_a_worker_with_its_events_and_tree(
    tmp_path: Path,
) -> None:
    # The answer comes 2 s after the tool's result: `--follow` must show the tool's events while
    # the task still runs on the worker, not only at its end.
    turns = [ADD_TURNS[0], {**ADD_TURNS[1], "delay_s": 2}]
    with temporal_server(tmp_path) as server:
        body = (
            scripted("adder", turns, tmp_path)
            + lean_mcp()
            + '[defaults]\nmodel = "adder"\nmcp = ["demo"]\n'
            + server.executor_toml()
        )
        with running_daemon(tmp_path, body) as daemon, running_worker(tmp_path, daemon.config) as worker:
            done = daemon.cli("submit", "add 20 and 22", "--follow", "--json", timeout_s=120)
            assert done.returncode == 0, done.stderr
            lines = [json.loads(line) for line in done.stdout.splitlines()]
            task_id = lines[-1]["task_id"]
            view = daemon.wait(task_id, timeout_s=5)
            assert view.status is S.COMPLETED, view
            assert view.result == "The answer is 42."
            assert (view.exit_code, view.usage.steps) == (0, 2)
            assert (view.executor, view.worker) == ("temporal", worker.identity)
            followed = [line for line in lines[:-1] if "event" in line]
            assert followed[0]["event"] == "task.attempt"
            assert followed[0]["fields"] == {"attempt": 1, "worker": worker.identity}
            names = [e["event"] for e in followed]
            assert {"subagent.ready", "loop.start", "tool.call", "tool.result", "loop.final"} <= set(names)
            assert "subagent.exit" in names
            (tool_result,) = [e for e in followed if e["event"] == "tool.result"]
            assert view.ended_at is not None and tool_result["ts"] < view.ended_at - 1.0
            logs = daemon.cli("logs", task_id, "--json")
            assert [json.loads(line)["event"] for line in logs.stdout.splitlines()] == names
            tree = daemon.call("task.tree", {"task_id": task_id})
            assert isinstance(tree, list) and len(tree) == 1
            assert isinstance(tree[0], dict) and tree[0]["status"] == "completed"
            # The subagent ran on the worker, not under the front door.
            assert any(line.get("event") == "subagent.spawn" for line in worker.log())
            assert not any(line.get("event") == "subagent.spawn" for line in daemon.log())
            (workflow,) = server.workflows()
            assert workflow["execution"]["workflowId"] == f"agentd-task-{task_id}"  # type: ignore[index]


def _fake_model(fake: FakeLLM) -> str:
    return f'[intelligence.fake]\nkind = "openai"\nbase_url = "{fake.base_url}"\nmodel = "m"\n[defaults]\nmodel = "fake"\n'


def _spawned_pids(worker: Worker) -> list[int]:
    return [int(line["pid"]) for line in worker.log() if line.get("event") == "subagent.spawn"]  # type: ignore[call-overload]


def test_agentd_cancel_reaches_the_activity_and_the_child_on_the_worker_is_gone_within_the_ladder(
    tmp_path: Path,
) -> None:
    with temporal_server(tmp_path) as server, FakeLLM(default=Hang()) as fake:
        body = _fake_model(fake) + server.executor_toml()
        with running_daemon(tmp_path, body) as daemon, running_worker(tmp_path, daemon.config) as worker:
            task_id = daemon.submit("wait for a model that never answers")
            fake.wait_requests_blocking(1, timeout_s=60)
            (pid,) = _spawned_pids(worker)
            assert psutil.pid_exists(pid)
            cancelled = daemon.cli("cancel", task_id, "--json")
            assert cancelled.returncode == 0, cancelled.stderr
            started = time.monotonic()
            view = daemon.wait(task_id, timeout_s=30)
            assert view.status is S.CANCELLED, view
            assert view.exit_code == 1
            fake.wait_aborted_blocking(1, timeout_s=10)
            # FAST_SUPERVISION's ladder: 0.5 s cancel + 0.5 s SIGTERM + 2 s reap, plus a heartbeat.
            while psutil.pid_exists(pid) and psutil.Process(pid).status() != psutil.STATUS_ZOMBIE:
                assert time.monotonic() - started < 10, "the child outlived the kill ladder"
                time.sleep(0.05)
            worker.wait_log("task.terminal", status="cancelled")


def test_a_deadline_ends_a_remote_task_with_deadline(tmp_path: Path) -> None:
    with temporal_server(tmp_path) as server, FakeLLM(default=Hang()) as fake:
        body = _fake_model(fake) + server.executor_toml()
        with running_daemon(tmp_path, body) as daemon, running_worker(tmp_path, daemon.config):
            task_id = daemon.submit("wait past the deadline", limits={"deadline_s": 4})
            view = daemon.wait(task_id, timeout_s=60)
            assert view.status is S.DEADLINE, view
            assert view.exit_code == 124


def test_an_idempotent_resubmit_starts_one_workflow(tmp_path: Path) -> None:
    with temporal_server(tmp_path) as server:
        body = (
            scripted("m", [{"text": "once"}], tmp_path) + '[defaults]\nmodel = "m"\n' + server.executor_toml()
        )
        with running_daemon(tmp_path, body) as daemon, running_worker(tmp_path, daemon.config):
            first = json.loads(daemon.cli("submit", "x", "--idempotency-key", "job-1", "--json").stdout)
            second = json.loads(daemon.cli("submit", "x", "--idempotency-key", "job-1", "--json").stdout)
            assert first["task_id"] == second["task_id"]
            assert (first["created"], second["created"]) == (True, False)
            assert daemon.wait(first["task_id"], timeout_s=60).status is S.COMPLETED
            third = json.loads(daemon.cli("submit", "x", "--idempotency-key", "job-1", "--json").stdout)
            assert third["task_id"] == first["task_id"]
            workflows = server.workflows()
            assert [w["execution"]["workflowId"] for w in workflows] == [f"agentd-task-{first['task_id']}"]  # type: ignore[index]


def test_kill_9_of_a_worker_mid_task_completes_it_on_another_worker_with_two_attempts(tmp_path: Path) -> None:
    with temporal_server(tmp_path) as server, FakeLLM() as fake:
        fake.enqueue(Hang(), chat("done on the second worker"))
        body = _fake_model(fake) + server.executor_toml(heartbeat_timeout_s='"2s"')
        with running_daemon(tmp_path, body) as daemon:
            first = start_worker(tmp_path, daemon.config, "worker-a")
            try:
                task_id = daemon.submit("survive a worker's death")
                fake.wait_requests_blocking(1, timeout_s=60)
                with running_worker(tmp_path, daemon.config, "worker-b") as second:
                    os.kill(first.proc.pid, signal.SIGKILL)
                    first.proc.wait(timeout=10)
                    view = daemon.wait(task_id, timeout_s=90)
                    assert view.status is S.COMPLETED, view
                    assert view.result == "done on the second worker"
                    assert view.worker == second.identity
                    logs = daemon.cli("logs", task_id, "--json")
                    attempts = [
                        json.loads(line)["fields"]
                        for line in logs.stdout.splitlines()
                        if json.loads(line)["event"] == "task.attempt"
                    ]
                    assert attempts == [
                        {"attempt": 1, "worker": first.identity},
                        {"attempt": 2, "worker": second.identity},
                    ]
            finally:
                if first.proc.poll() is None:
                    first.proc.kill()
                    first.proc.wait()


def test_temporal_unreachable_at_start_is_one_line_and_exit_1_for_serve_and_worker(tmp_path: Path) -> None:
    nobody = free_port()
    executor = f'[executor]\nkind = "temporal"\ntarget = "127.0.0.1:{nobody}"\nconnect_timeout_s = "3s"\n'
    config = write_config(tmp_path, executor)
    reason = refused_start(config)
    assert f"127.0.0.1:{nobody}" in reason and "ExecutorUnavailable" in reason
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "agentd",
            "worker",
            "--config",
            str(config),
            "--state-dir",
            str(tmp_path / "w"),
        ],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 1, done.stderr[-2000:]
    lines = [json.loads(line) for line in done.stderr.splitlines() if line.startswith("{")]
    (exit_line,) = [line for line in lines if line["event"] == "proc.exit"]
    assert f"127.0.0.1:{nobody}" in str(exit_line["err"])


def test_a_submit_while_temporal_is_unreachable_is_retryable_and_nothing_is_accepted(tmp_path: Path) -> None:
    with temporal_server(tmp_path) as server:
        body = (
            scripted("m", [{"text": "x"}], tmp_path)
            + '[defaults]\nmodel = "m"\n'
            + server.executor_toml(connect_timeout_s='"2s"')
        )
        with running_daemon(tmp_path, body) as daemon:
            server.proc.kill()
            server.proc.wait(timeout=10)
            with daemon.client() as client, pytest.raises(ApiClientError) as caught:
                client.call(SubmitRequest(params=SubmitParams(spec=TaskSpec(instruction="x"))))
            assert caught.value.code == UNAVAILABLE
            assert caught.value.retryable
            assert daemon.cli("list", "--json").stdout.strip() == ""
            done = daemon.cli("submit", "x")
            assert done.returncode != 0 and "not accepted" in done.stderr


def test_two_workers_share_40_tasks(tmp_path: Path) -> None:
    with temporal_server(tmp_path) as server:
        body = (
            scripted("m", [{"text": "done"}], tmp_path) + '[defaults]\nmodel = "m"\n' + server.executor_toml()
        )
        with (
            running_daemon(tmp_path, body) as daemon,
            running_worker(tmp_path, daemon.config, "worker-a") as a,
            running_worker(tmp_path, daemon.config, "worker-b") as b,
        ):
            task_ids = [daemon.submit(f"task {i}") for i in range(40)]
            views = [daemon.wait(task_id, timeout_s=240) for task_id in task_ids]
            assert {v.status for v in views} == {S.COMPLETED}
            by_worker = {w: sum(1 for v in views if v.worker == w) for w in (a.identity, b.identity)}
            assert sum(by_worker.values()) == 40
            assert min(by_worker.values()) > 0, by_worker
            assert len(server.workflows()) == 40


def _spawn(instruction: str, **args: object) -> dict[str, object]:
    return {"name": "subagent_spawn", "arguments": {"instruction": instruction, **args}}


def test_nested_subagents_on_a_worker_roll_up_their_usage_and_keep_the_tree_budget(tmp_path: Path) -> None:
    u = {"usage": {"tokens_in": 100, "tokens_out": 10}}
    roles = [
        {
            "match": "^L1:",
            "turns": [
                {"tool_calls": [_spawn("L2: leaf work")], **u},
                {"text": "L1 got {last_tool_result}", **u},
            ],
        },
        {"match": "^L2:", "turns": [{"text": "leaf done", **u}]},
        # Over the task's ceiling: the worker's supervisor ends the whole tree exhausted_tokens.
        {
            "match": "^spender",
            "turns": [
                {
                    "text": "working",
                    "usage": {"tokens_in": 11_000, "tokens_out": 0},
                    "tool_calls": [{"name": "note_read", "arguments": {}}],
                },
                {"text": "more", "delay_s": 60},
            ],
        },
        {
            "match": "^spend it all",
            "turns": [
                {
                    "tool_calls": [_spawn("spender", max_tokens=12_000, wait=False)],
                    "usage": {"tokens_in": 5000, "tokens_out": 0},
                },
                {
                    "text": "busy",
                    "delay_s": 3,
                    "usage": {"tokens_in": 6000, "tokens_out": 0},
                    "tool_calls": [{"name": "note_read", "arguments": {}}],
                },
                {"text": "still going", "delay_s": 60},
            ],
        },
    ]
    turns: list[dict[str, object]] = [
        {"tool_calls": [_spawn("L1: middle work")], **u},
        {"text": "root got {last_tool_result}", **u},
    ]
    with temporal_server(tmp_path) as server:
        body = (
            scripted("tree", turns, tmp_path, roles=roles)
            + '[defaults]\nmodel = "tree"\n'
            + server.executor_toml()
        )
        with running_daemon(tmp_path, body) as daemon, running_worker(tmp_path, daemon.config):
            nested = daemon.submit("delegate twice")
            greedy = daemon.submit("spend it all", limits={"max_tokens": 20_000})
            view = daemon.wait(nested, timeout_s=120)
            assert view.status is S.COMPLETED, view
            assert isinstance(view.result, str) and "leaf done" in view.result
            assert (view.usage.tokens_in, view.usage.tokens_out, view.usage.steps) == (500, 50, 5)
            tree = daemon.call("task.tree", {"task_id": nested})
            assert isinstance(tree, list)
            by_handle: dict[str, Any] = {n["handle"]: n for n in tree}
            assert sorted(by_handle) == ["0", "0.1", "0.1.1"]
            assert by_handle["0.1.1"]["parent"] == "0.1"
            assert {n["status"] for n in by_handle.values()} == {"completed"}
            over = daemon.wait(greedy, timeout_s=120)
            assert over.status is S.EXHAUSTED_TOKENS, over
            assert over.exit_code in (3, 7)


def test_a_draining_worker_notifies_systemd_and_hands_its_task_back_to_another_worker(tmp_path: Path) -> None:
    notify = FakeNotifySocket(tmp_path / "notify.sock")
    with temporal_server(tmp_path) as server, FakeLLM() as fake:
        fake.enqueue(Hang(), chat("done after the hand-back"))
        body = _fake_model(fake) + server.executor_toml()
        with running_daemon(tmp_path, body, daemon_lines='drain_timeout_s = "6s"\n') as daemon:
            first = start_worker(tmp_path, daemon.config, "worker-a", env=notify.env())
            try:
                ready = notify.wait_for("READY", timeout_s=10)
                assert ready.fields["STATUS"].startswith(f"worker {first.identity} polling")
                task_id = daemon.submit("outlive a drain")
                fake.wait_requests_blocking(1, timeout_s=60)
                (pid,) = _spawned_pids(first)
                with running_worker(tmp_path, daemon.config, "worker-b") as second:
                    started = time.monotonic()
                    assert first.stop(timeout_s=40) == 0
                    # Within the drain cap (6 s) plus the exit.
                    assert time.monotonic() - started < 15
                    assert "STOPPING" in notify.key_sequence() or notify.wait_for("STOPPING", timeout_s=1)
                    assert not psutil.pid_exists(pid) or psutil.Process(pid).status() == psutil.STATUS_ZOMBIE
                    view = daemon.wait(task_id, timeout_s=90)
                    assert view.status is S.COMPLETED, view
                    assert view.worker == second.identity
                    logs = [
                        json.loads(line) for line in daemon.cli("logs", task_id, "--json").stdout.splitlines()
                    ]
                    assert [e["fields"]["attempt"] for e in logs if e["event"] == "task.attempt"] == [1, 2]
            finally:
                if first.proc.poll() is None:
                    first.proc.kill()
                    first.proc.wait()
                notify.close()


def test_a_front_door_restart_leaves_a_remote_task_running_and_the_next_one_follows_it(
    tmp_path: Path,
) -> None:
    turns: list[dict[str, object]] = [{"text": "finished while the front door was away", "delay_s": 8}]
    with temporal_server(tmp_path) as server:
        body = scripted("slow", turns, tmp_path) + '[defaults]\nmodel = "slow"\n' + server.executor_toml()
        with running_daemon(tmp_path, body) as daemon, running_worker(tmp_path, daemon.config) as worker:
            task_id = daemon.submit("outlive the front door")
            worker.wait_log("loop.start", timeout_s=120)
            # The drain stops following; it does not cancel the task on the worker.
            assert daemon.stop(timeout_s=40) == 0
            left = [line for line in daemon.log() if line.get("event") == "task.terminal"]
            assert left == []
            again = start_daemon(tmp_path, daemon.config)
            try:
                view = again.wait(task_id, timeout_s=120)
                assert view.status is S.COMPLETED, view
                assert view.result == "finished while the front door was away"
                assert view.worker == worker.identity
                assert len(server.workflows()) == 1
                assert worker.wait_log("task.terminal", status="completed")
                assert not [
                    line
                    for line in worker.log()
                    if line.get("event") == "task.terminal" and line.get("status") != "completed"
                ]
            finally:
                assert again.stop(timeout_s=40) == 0
