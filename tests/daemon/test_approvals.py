"""The approval gate end to end: a real daemon, the scripted model, a real stdio MCP
server whose `record` tool appends to a file (so "the call ran exactly once" is counted, not
assumed), and real clients — including another uid and a pseudo-terminal.

One daemon serves most tests (CI time); each test uses its own instruction (a role of the one
script) and its own `record` text. The restart test runs its own daemon.
"""

from __future__ import annotations

import json
import os
import pty
import select
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from typing import Any

import psutil
import pytest

from agentd.api.client import ApiClient
from agentd.errors import ApiClientError
from protocol.api import (
    INVALID_SPEC,
    NOT_FOUND,
    ApprovalDecideParams,
    ApprovalDecideRequest,
    ApprovalListParams,
    ApprovalListRequest,
    EventsParams,
    EventsRequest,
    TaskView,
)
from protocol.jsonrpc import INVALID_PARAMS
from protocol.result import TerminalStatus as S
from tests.support.approvals import (
    WAIT_S,
    approvals_body,
    pending_request,
    recorded_calls,
)
from tests.support.as_user import NOBODY, NOGROUP, fork_as_nobody
from tests.support.daemon import Daemon, start_daemon, write_config
from tests.support.leaks import wait_no_descendants
from tests.support.privilege import AS_ANOTHER_USER


def _raw(daemon: Daemon, frame: dict[str, object]) -> dict[str, Any]:
    """Send one frame as a hostile client would (no client-side validation); its answer."""
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as sock:
        sock.settimeout(10)
        sock.connect(str(daemon.socket))
        sock.sendall(json.dumps(frame).encode() + b"\n")
        data = b""
        while not data.endswith(b"\n"):
            chunk = sock.recv(65536)
            assert chunk, "the daemon closed the connection without an answer"
            data += chunk
    answer = json.loads(data)
    assert isinstance(answer, dict)
    return answer


def _events(daemon: Daemon, task_id: str, name: str) -> list[dict[str, Any]]:
    with daemon.client() as client:
        out = []
        for item in client.stream(EventsRequest(params=EventsParams(task_id=task_id))):
            if isinstance(item, TaskView):
                break
            if item.event == name:
                out.append(dict(item.fields))
        return out


def _no_children(daemon: Daemon, task_id: str) -> None:
    """The task's subagents are gone (the module's end checks every process, the daemon's too)."""
    tree = daemon.call("task.tree", {"task_id": task_id})
    assert isinstance(tree, list)
    pids = [n["pid"] for n in tree if n["pid"] is not None]
    deadline = time.monotonic() + WAIT_S
    while True:
        alive = [
            p for p in pids if psutil.pid_exists(p) and psutil.Process(p).status() != psutil.STATUS_ZOMBIE
        ]
        if not alive:
            return
        assert time.monotonic() < deadline, f"subagents left: {alive}"
        time.sleep(0.05)


@pytest.fixture(scope="module")
def daemon(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Daemon]:
    workdir = tmp_path_factory.mktemp("approvals")
    # The socket sits in its own directory, reachable by the socket's group (the other-uid test).
    socket_path = workdir / "run" / "agentd.sock"
    config = write_config(
        workdir,
        approvals_body(workdir),
        daemon=f'socket_group = "{NOGROUP}"\n',
        socket=socket_path,
    )
    started = start_daemon(workdir, config, socket=socket_path)
    try:
        yield started
    finally:
        code = started.stop(timeout_s=40)
        assert code == 0, started.log_path.read_text()[-3000:]
        strays = wait_no_descendants(timeout_s=10.0)
        assert not strays, f"processes left behind: {strays}"


def test_an_approved_call_runs_exactly_once_and_the_task_shows_awaiting_approval(daemon: Daemon) -> None:
    task_id = daemon.submit("approve-once")
    request = pending_request(daemon, task_id)
    assert (request["server"], request["tool"], request["arguments"]) == (
        "demo",
        "record",
        {"text": "approve-once"},
    )
    assert request["state"] == "pending" and request["instruction"] == "approve-once"
    # Held before the server: nothing ran yet, and the task says why it waits.
    assert recorded_calls(daemon, "approve-once") == 0
    view = daemon.call("task.get", {"task_id": task_id})
    assert isinstance(view, dict) and view["state"] == "awaiting_approval"
    listed = daemon.call("task.list", {})
    assert isinstance(listed, list)
    assert [t["state"] for t in listed if t["task_id"] == task_id] == ["awaiting_approval"]
    tree = daemon.call("task.tree", {"task_id": task_id})
    assert isinstance(tree, list) and tree[0]["state"] == "awaiting_approval"
    shown = daemon.cli("approvals")
    assert shown.returncode == 0 and request["call"] in shown.stdout and "demo__record" in shown.stdout

    approved = daemon.cli("approve", task_id)  # the task's one pending request
    assert approved.returncode == 0, approved.stderr
    final = daemon.wait(task_id)
    assert final.status is S.COMPLETED, final
    assert final.result == "recorded approve-once"
    assert recorded_calls(daemon, "approve-once") == 1
    (decided,) = _events(daemon, task_id, "approval.decided")
    assert decided["outcome"] == "approved" and decided["decider_uid"] == os.geteuid()
    assert isinstance(decided["wait_ms"], int) and decided["wait_ms"] >= 0
    # Decided: a second decision is refused, and nothing is pending any more.
    again = daemon.cli("deny", task_id, request["call"], "--reason", "late")
    assert again.returncode != 0 and "already approved" in again.stderr
    _no_children(daemon, task_id)


def test_a_denial_with_a_reason_reaches_the_model_and_the_call_never_runs(daemon: Daemon) -> None:
    task_id = daemon.submit("deny-reason")
    request = pending_request(daemon, task_id)
    denied = daemon.cli("deny", task_id, request["call"], "--reason", "not on Fridays")
    assert denied.returncode == 0, denied.stderr
    final = daemon.wait(task_id)
    # The loop went on: the model's next request carried the denial (its reply quotes it).
    assert final.status is S.COMPLETED
    assert isinstance(final.result, str)
    assert "a person denied it: not on Fridays" in final.result
    assert recorded_calls(daemon, "deny-reason") == 0
    (decided,) = _events(daemon, task_id, "approval.decided")
    assert (decided["outcome"], decided["reason"]) == ("denied", "not on Fridays")
    _no_children(daemon, task_id)


def test_a_request_nobody_decides_is_denied_at_its_timeout(daemon: Daemon) -> None:
    task_id = daemon.submit("timeout", mcp=["quick"])
    final = daemon.wait(task_id)
    assert final.status is S.COMPLETED
    assert isinstance(final.result, str) and "nobody approved it within" in final.result
    assert recorded_calls(daemon, "timeout") == 0
    (decided,) = _events(daemon, task_id, "approval.decided")
    assert decided["outcome"] == "timeout" and decided["decider_uid"] is None
    _no_children(daemon, task_id)


def test_a_client_adds_a_gate_and_a_spec_cannot_remove_the_operators(daemon: Daemon) -> None:
    # `echo` is not gated by the operator; the client's --approve gates it for this task.
    task_id = json.loads(daemon.cli("submit", "client-gate", "--approve", "demo/echo", "--json").stdout)[
        "task_id"
    ]
    request = pending_request(daemon, task_id)
    assert request["tool"] == "echo"
    assert daemon.cli("approve", task_id, request["call"]).returncode == 0
    assert daemon.wait(task_id).result == "client-gate"
    # A spec has no way to name the operator's gate: an attempt is an invalid request, and a
    # pattern for a server the task is not granted is refused by name.
    frame = {"jsonrpc": "2.0", "id": 1, "method": "task.submit"}
    frame["params"] = {"spec": {"instruction": "approve-once", "approval": []}}
    removed = _raw(daemon, frame)
    assert removed["error"]["code"] == INVALID_PARAMS and "extra_forbidden" in removed["error"]["message"]
    with pytest.raises(ApiClientError) as unknown:
        daemon.call("task.submit", {"spec": {"instruction": "x", "approve": ["nope/tool"]}})
    assert unknown.value.code == INVALID_SPEC and "names no MCP server granted" in unknown.value.message
    _no_children(daemon, task_id)


def test_a_cancel_ends_the_wait_within_the_ladder_bound_and_withdraws_the_request(daemon: Daemon) -> None:
    task_id = daemon.submit("cancel-wait")
    pending_request(daemon, task_id)
    started = time.monotonic()
    daemon.call("task.cancel", {"task_id": task_id})
    final = daemon.wait(task_id)
    took_s = time.monotonic() - started
    assert final.status is S.CANCELLED
    # The fast ladder (cancel 0.5 s, term 0.5 s, kill-reap 2 s) bounds it; most of it is slack.
    assert took_s < 5.0, took_s
    assert recorded_calls(daemon, "cancel-wait") == 0
    assert daemon.call("approval.list", {"task_id": task_id}) == []
    (decided,) = _events(daemon, task_id, "approval.decided")
    assert decided["state"] == "withdrawn"
    _no_children(daemon, task_id)


def test_a_nested_child_calling_a_gated_tool_waits_too(daemon: Daemon) -> None:
    task_id = daemon.submit("nested")
    request = pending_request(daemon, task_id, handle="0.1")
    tree = daemon.call("task.tree", {"task_id": task_id})
    assert isinstance(tree, list)
    assert {n["handle"]: n["state"] for n in tree} == {"0": "running", "0.1": "awaiting_approval"}
    assert recorded_calls(daemon, "child: nested") == 0
    assert daemon.cli("approve", task_id, request["call"]).returncode == 0
    final = daemon.wait(task_id)
    assert final.status is S.COMPLETED
    assert isinstance(final.result, str) and "recorded child: nested" in final.result
    assert recorded_calls(daemon, "child: nested") == 1
    _no_children(daemon, task_id)


def _other_uid(task_id: str, path: str) -> dict[str, Any]:
    """What `nobody` sees of root's waiting request (runs in the privilege-dropped child)."""
    out: dict[str, Any] = {}
    with ApiClient(path, timeout_s=10) as client:
        out["list"] = [v.call for v in client.call(ApprovalListRequest())]
        try:
            client.call(ApprovalListRequest(params=ApprovalListParams(task_id=task_id)))
            out["list_task"] = "allowed"
        except ApiClientError as exc:
            out["list_task"] = {"code": exc.code, "message": exc.message}
        try:
            client.call(ApprovalDecideRequest(params=ApprovalDecideParams(task_id=task_id, approve=True)))
            out["approve"] = "allowed"
        except ApiClientError as exc:
            out["approve"] = {"code": exc.code, "message": exc.message}
    return out


@AS_ANOTHER_USER
def test_another_uid_neither_sees_nor_decides_a_request(daemon: Daemon) -> None:
    task_id = daemon.submit("other-uid")
    request = pending_request(daemon, task_id)
    seen = fork_as_nobody(daemon.socket.parent, task_id, "agentd.sock", [], scenario=_other_uid)
    assert seen["list"] == []
    assert seen["list_task"] == {"code": NOT_FOUND, "message": f"no task {task_id!r}"}
    assert seen["approve"] == {"code": NOT_FOUND, "message": f"no task {task_id!r}"}
    # Still pending; its owner (root) decides it.
    assert pending_request(daemon, task_id)["call"] == request["call"]
    assert recorded_calls(daemon, "other-uid") == 0
    assert daemon.cli("deny", task_id, "--reason", "cleanup").returncode == 0
    assert daemon.wait(task_id).status is S.COMPLETED
    assert os.geteuid() != NOBODY
    _no_children(daemon, task_id)


def _read_until(fd: int, marker: bytes, seen: bytearray, timeout_s: float) -> None:
    deadline = time.monotonic() + timeout_s
    while marker not in seen:
        left = deadline - time.monotonic()
        assert left > 0, f"no {marker!r} on the terminal; saw: {seen.decode(errors='replace')[-2000:]}"
        ready, _, _ = select.select([fd], [], [], left)
        if ready:
            try:
                chunk = os.read(fd, 4096)
            except OSError:  # EIO: the other side closed
                chunk = b""
            if not chunk:
                raise AssertionError(f"terminal closed before {marker!r}: {seen.decode(errors='replace')}")
            seen.extend(chunk)


def test_submit_follow_on_a_terminal_shows_the_request_and_approves_on_y(daemon: Daemon) -> None:
    master, slave = pty.openpty()
    proc = subprocess.Popen(
        [sys.executable, "-m", "agentd", "submit", "pty", "--follow", "--socket", str(daemon.socket)],
        stdin=slave,
        stdout=slave,
        stderr=slave,
        start_new_session=True,
    )
    os.close(slave)
    seen = bytearray()
    try:
        _read_until(master, b"approve? [y/N]", seen, WAIT_S)
        text = seen.decode()
        assert '⏸ awaiting approval: demo__record {"text":"pty"}' in text
        assert recorded_calls(daemon, "pty") == 0
        os.write(master, b"y\n")
        _read_until(master, b"recorded pty", seen, WAIT_S)
        assert proc.wait(timeout=WAIT_S) == 0
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
        os.close(master)
    assert "✓ approved by uid" in seen.decode()
    assert recorded_calls(daemon, "pty") == 1
    listed = daemon.call("task.list", {})
    assert isinstance(listed, list)
    (task_id,) = [t["task_id"] for t in listed if t["instruction"] == "pty"]
    _no_children(daemon, task_id)
