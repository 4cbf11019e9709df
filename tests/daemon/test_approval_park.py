"""A task waiting for a person's approval is parked: after `park_approval_after` its subagent
stops and its run slot frees, so other tasks run while nobody decides; once the call is decided
(or its request expires) the task resumes from its transcript and the decision reaches the call,
which runs at most once. A real daemon with one run slot (the module checks for leaks at its end), the scripted model and a real stdio MCP
server whose `record` tool appends to a file (so "ran once" is counted)."""

from __future__ import annotations

import json
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import psutil
import pytest

from protocol.result import TerminalStatus as S
from tests.support.daemon import LEAN_SERVER, Daemon, start_daemon, write_config
from tests.support.leaks import wait_no_descendants

WAIT_S = 30.0


def _body(workdir: Path) -> str:
    def record(server: str, text: str) -> list[dict[str, object]]:
        call: dict[str, object] = {"tool_calls": [{"name": f"{server}__record", "arguments": {"text": text}}]}
        return [call, {"text": "{last_tool_result}"}]

    roles = [
        {"match": f"^{name}", "turns": record(server, name)}
        for name, server in (("park-approve", "demo"), ("park-deny", "demo"), ("park-expire", "slow"))
    ]
    roles.append({"match": "^park-cancel", "turns": record("demo", "park-cancel")})
    script = workdir / "play.json"
    script.write_text(json.dumps({"model": "scripted-play", "turns": [{"text": "done"}], "roles": roles}))
    calls = workdir / "calls"
    calls.mkdir()
    server = (
        f'command = ["{sys.executable}", "{LEAN_SERVER}"]\ntrust = []\n'
        f'env = {{ AGENTD_TEST_SENTINEL_DIR = "{calls}" }}\n'
    )
    return (
        f'[intelligence.play]\nkind = "scripted"\nscript = "{script}"\n'
        f'[mcp.demo]\n{server}approval = ["record"]\napproval_timeout = "60s"\n'
        f'[mcp.slow]\n{server}approval = ["record"]\napproval_timeout = "4s"\n'
        '[defaults]\nmodel = "play"\nmcp = ["demo", "slow"]\n'
    )


@pytest.fixture(scope="module")
def daemon(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Daemon]:
    workdir = tmp_path_factory.mktemp("park")
    lines = 'max_concurrent_tasks = 1\npark_approval_after = "1s"\n'
    started = start_daemon(workdir, write_config(workdir, _body(workdir), daemon=lines))
    try:
        yield started
    finally:
        assert started.stop(timeout_s=40) == 0, started.log_path.read_text()[-3000:]
        strays = wait_no_descendants(timeout_s=10.0)
        assert not strays, f"processes left behind: {strays}"


def _calls(daemon: Daemon, text: str) -> int:
    log = daemon.workdir / "calls" / "calls.log"
    return log.read_text().splitlines().count(text) if log.exists() else 0


def _parked(daemon: Daemon, task_id: str) -> dict[str, Any]:
    """Wait until the task is parked on its one pending request; that request."""
    parked = daemon.wait_log("task.parked", timeout_s=WAIT_S, task_id=task_id)
    requests = daemon.call("approval.list", {"task_id": task_id})
    assert isinstance(requests, list) and len(requests) == 1, requests
    request = requests[0]
    assert isinstance(request, dict) and parked["call"] == request["call"], (parked, request)
    view = daemon.call("task.get", {"task_id": task_id})
    assert isinstance(view, dict) and view["state"] == "awaiting_approval", view
    return request


def _no_subagent(daemon: Daemon, task_id: str, pids: list[int]) -> None:
    """The subagents `task_id` ran in (`pids`, read before it was parked) are gone."""
    assert pids, "the task's tree named no subagent"
    deadline = time.monotonic() + WAIT_S
    while True:
        alive = [
            p for p in pids if psutil.pid_exists(p) and psutil.Process(p).status() != psutil.STATUS_ZOMBIE
        ]
        if not alive:
            return
        assert time.monotonic() < deadline, f"{task_id}'s subagents still run while it is parked: {alive}"
        time.sleep(0.05)


def _subagent_pids(daemon: Daemon, task_id: str) -> list[int]:
    """The pids of `task_id`'s running nodes, once its root runs (bounded)."""
    deadline = time.monotonic() + WAIT_S
    while True:
        tree = daemon.call("task.tree", {"task_id": task_id})
        assert isinstance(tree, list)
        pids = [n["pid"] for n in tree if isinstance(n, dict) and isinstance(n.get("pid"), int)]
        if pids:
            return pids
        assert time.monotonic() < deadline, f"{task_id} never ran: {tree}"
        time.sleep(0.02)


def test_a_parked_task_frees_its_slot_and_resumes_to_run_the_approved_call_once(daemon: Daemon) -> None:
    waiting = daemon.submit("park-approve")
    pids = _subagent_pids(daemon, waiting)
    request = _parked(daemon, waiting)
    _no_subagent(daemon, waiting, pids)
    # The daemon's one slot is free: another task runs to its end while the first waits.
    other = daemon.wait(daemon.submit("something else"), timeout_s=WAIT_S)
    assert other.status is S.COMPLETED, other
    assert daemon.call("task.get", {"task_id": waiting})["state"] == "awaiting_approval"  # type: ignore[index]
    assert daemon.cli("approve", waiting, request["call"]).returncode == 0
    final = daemon.wait(waiting, timeout_s=WAIT_S)
    assert final.status is S.COMPLETED, final
    assert final.result == "recorded park-approve"
    assert final.resumes == 1 and final.attempts == 0
    assert _calls(daemon, "park-approve") == 1
    daemon.wait_log("approval.decided", task_id=waiting, honoured=True)


def test_a_denial_made_while_parked_reaches_the_model_and_the_call_never_runs(daemon: Daemon) -> None:
    task_id = daemon.submit("park-deny")
    request = _parked(daemon, task_id)
    denied = daemon.cli("deny", task_id, request["call"], "--reason", "not while parked")
    assert denied.returncode == 0, denied.stderr
    final = daemon.wait(task_id, timeout_s=WAIT_S)
    assert final.status is S.COMPLETED, final
    assert "not while parked" in str(final.result)
    assert _calls(daemon, "park-deny") == 0


def test_a_request_that_expires_while_parked_resumes_the_task_with_a_timeout(daemon: Daemon) -> None:
    task_id = daemon.submit("park-expire")
    _parked(daemon, task_id)
    final = daemon.wait(task_id, timeout_s=WAIT_S)  # nobody decides: the 4 s request expires
    assert final.status is S.COMPLETED, final
    assert "nobody approved it within 4 s, so it was denied" in str(final.result), final.result
    assert _calls(daemon, "park-expire") == 0
    assert final.resumes == 1


def test_cancelling_a_parked_task_ends_it_and_its_request(daemon: Daemon) -> None:
    task_id = daemon.submit("park-cancel")
    _parked(daemon, task_id)
    assert daemon.cli("cancel", task_id).returncode == 0
    final = daemon.wait(task_id, timeout_s=WAIT_S)
    assert final.status is S.CANCELLED, final
    assert daemon.call("approval.list", {"task_id": task_id}) == []
    assert _calls(daemon, "park-cancel") == 0
