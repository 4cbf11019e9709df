"""`agentd top` against a real daemon running a task with a nested subagent: the JSON snapshot
when piped, the live tree on an 80-column pseudo-terminal (quit with `q` and with Ctrl-C), and uid
scoping (another user sees none of it)."""

from __future__ import annotations

import json
import os
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from agentd.api.client import ApiClient
from agentd.cli.top import Collector
from tests.support.as_user import NOGROUP, forked_as
from tests.support.daemon import Daemon, running_daemon, scripted
from tests.support.terminal import open_terminal

pytestmark = pytest.mark.processes

# The root delegates to a child that sits in a 60 s "model call" until it is cancelled.
TURNS: list[dict[str, object]] = [
    {"tool_calls": [{"name": "subagent_spawn", "arguments": {"instruction": "child: wait"}}]},
    {"text": "the child answered {last_tool_result}"},
]
ROLES = [{"match": "^child:", "turns": [{"text": "late", "delay_s": 60}]}]


@contextmanager
def _nested_task(tmp_path: Path, daemon_lines: str = "") -> Iterator[tuple[Daemon, str]]:
    body = scripted("m", TURNS, tmp_path, roles=ROLES) + '[defaults]\nmodel = "m"\n'
    with running_daemon(tmp_path, body, daemon_lines=daemon_lines) as daemon:
        task_id = daemon.submit("delegate and wait")
        deadline = time.monotonic() + 30
        while True:
            tree = daemon.call("task.tree", {"task_id": task_id})
            assert isinstance(tree, list)
            if [n["state"] for n in tree if isinstance(n, dict)] == ["running", "running"]:
                break
            assert time.monotonic() < deadline, f"the child never ran: {tree}"
            time.sleep(0.05)
        daemon.wait_log("subagent.ready", handle="0.1")
        try:
            yield daemon, task_id
        finally:
            daemon.call("task.cancel", {"task_id": task_id})
            daemon.wait(task_id, timeout_s=30)


def test_piped_top_prints_one_json_snapshot_of_the_tree(tmp_path: Path) -> None:
    with _nested_task(tmp_path) as (daemon, task_id):
        done = daemon.cli("top", timeout_s=60)
        assert done.returncode == 0, done.stderr
        (line,) = done.stdout.splitlines()
        snapshot = json.loads(line)
    assert snapshot["daemon"]["pid"] == daemon.pid
    (task,) = snapshot["tasks"]
    assert task["task_id"] == task_id
    assert task["state"] == "running"
    assert task["age_s"] > 0
    root, child = task["nodes"]
    assert (root["handle"], root["parent"], child["handle"], child["parent"]) == ("0", None, "0.1", "0")
    for node in (root, child):
        assert node["state"] == "running"
        assert node["pid"] > 0
        assert node["rss_bytes"] > 1 << 20
        assert node["cpu_percent"] is not None
        assert node["grant_tokens"] > 0
        assert node["last_event"] is not None
    assert root["steps"] == 1  # its one turn so far: the delegation
    assert child["last_event"]["event"] in {"loop.start", "intel.call", "subagent.ready"}
    assert snapshot["totals"]["tasks"] == 1
    assert snapshot["totals"]["subagents"] == 2


@pytest.mark.alone  # a pseudo-terminal's redraws and key handling, with fast supervision knobs
@pytest.mark.parametrize(("key", "name"), [(b"q", "q"), (b"\x03", "ctrl-c")])
def test_live_top_shows_the_running_tree_in_80_columns_and_quits(
    tmp_path: Path, key: bytes, name: str
) -> None:
    with _nested_task(tmp_path) as (daemon, task_id):
        terminal = open_terminal(["top", "--socket", str(daemon.socket), "--interval", "0.2"], columns=80)
        try:
            wanted = [task_id[:14], "└─ 0.1", "running", "TASK / NODE", "STATUS", "STEP", "TOKENS", "CPU%"]
            screen = terminal.wait_for(wanted)
            assert task_id not in screen  # the short id, not all 28 characters
            assert f"pid {daemon.pid}" in screen  # the daemon's health line
            assert "1 task · 2 subagents" in screen
            # The view refreshes: the root's age advances.
            terminal.wait_for(["q or Ctrl-C quits"], timeout_s=5)
            terminal.type(key)
            assert terminal.wait_exit() == 0, name
        finally:
            terminal.close()


def _collect_as_nobody(cwd: Path) -> dict[str, object]:
    """A snapshot taken by another user (forked, privileges dropped), as JSON."""

    def collect() -> object:
        with ApiClient("agentd.sock", timeout_s=10) as client:
            return json.loads(Collector(client).collect().model_dump_json())

    return forked_as(collect, cwd=cwd)


@pytest.mark.skipif(os.geteuid() != 0, reason="needs root to act as another uid")
def test_another_user_sees_none_of_the_tasks_in_top(tmp_path: Path) -> None:
    tmp_path.chmod(0o755)
    with _nested_task(tmp_path, daemon_lines=f'socket_group = "{NOGROUP}"\n') as (_daemon, _):
        seen = _collect_as_nobody(tmp_path)
        assert seen["tasks"] == []
        daemon_view = seen["daemon"]
        assert isinstance(daemon_view, dict)
        assert daemon_view["scope"] == "caller"
        assert daemon_view["running"] == 0
