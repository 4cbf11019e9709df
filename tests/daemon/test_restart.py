"""Restart recovery and drain: a daemon killed with -9 loses no acknowledged task; SIGTERM drains."""

from __future__ import annotations

import signal
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

import psutil
import pytest

from protocol.result import TerminalStatus as S
from tests.support.daemon import running_daemon, start_daemon, write_config
from tests.support.rogue_daemon import rogue_daemon

pytestmark = pytest.mark.processes


def test_kill_9_of_the_daemon_loses_no_task_and_leaves_no_survivor(tmp_path: Path) -> None:
    config = write_config(tmp_path, rogue_daemon(tmp_path), fast=False, daemon="max_concurrent_tasks = 2\n")
    daemon = start_daemon(tmp_path, config)
    retried = daemon.submit("ignore-cancel")
    once = daemon.submit("ignore-cancel", retry={"max_attempts": 1})
    queued = [daemon.submit("complete") for _ in range(3)]
    old_pids = daemon.wait_ready([retried, once])
    daemon.proc.send_signal(signal.SIGKILL)
    daemon.proc.wait(timeout=10)
    for pid in old_pids.values():
        assert psutil.pid_exists(pid), (
            "the rogue child survives its daemon (no PDEATHSIG): recovery must kill it"
        )

    daemon = start_daemon(tmp_path, config)
    try:
        for pid in old_pids.values():
            assert not psutil.pid_exists(pid) or psutil.Process(pid).status() == psutil.STATUS_ZOMBIE
        crashed = daemon.wait(once, timeout_s=5)
        assert crashed.status is S.CRASHED
        assert crashed.error is not None
        assert crashed.error.kind == "supervisor_restart"
        for task_id in queued:
            assert daemon.wait(task_id).status is S.COMPLETED
        again = daemon.call("task.get", {"task_id": retried})
        assert isinstance(again, dict)
        assert again["attempts"] == 1
        assert again["state"] in ("queued", "starting", "running")
        recovery = [line for line in daemon.log() if line.get("event") == "subagent.restart"]
        assert {line["outcome"] for line in recovery} == {"requeued", "crashed"}
        assert all(line["survivor_killed"] for line in recovery)
    finally:
        assert daemon.stop(timeout_s=40) == 0
    assert daemon.proc.returncode == 0


@pytest.mark.parametrize("on_stop", ["park", "cancel"])
def test_sigterm_drains_running_tasks_and_exits_0(tmp_path: Path, on_stop: str) -> None:
    lines = f'on_stop = "{on_stop}"\n'
    with running_daemon(tmp_path, rogue_daemon(tmp_path), daemon_lines=lines) as daemon:
        tasks = [daemon.submit("ignore-cancel"), daemon.submit("ignore-cancel")]
        daemon.wait_ready(tasks)
        started = time.monotonic()
        assert daemon.stop(signal.SIGTERM, timeout_s=30) == 0
        assert time.monotonic() - started < 25
    if on_stop == "park":  # queued again, to go on from its transcript; no attempt spent
        assert [_journaled(tmp_path, t) for t in tasks] == [("queued", None, 1, 0)] * 2
        return
    daemon = start_daemon(tmp_path, daemon.config)
    try:
        for task_id in tasks:
            view = daemon.call("task.get", {"task_id": task_id})
            assert isinstance(view, dict)
            assert view["status"] == "cancelled"
            assert view["exit_code"] == 0  # a clean drain
    finally:
        assert daemon.stop() == 0


def _journaled(tmp_path: Path, task_id: str) -> tuple[object, ...]:
    """A stopped daemon's task as its journal holds it: state, status, resumes, attempts."""
    with sqlite3.connect(f"file:{tmp_path / 'state' / 'agentd.db'}?mode=ro", uri=True) as conn:
        row = conn.execute(
            "SELECT state, status, resumes, attempts FROM tasks WHERE task_id = ?", (task_id,)
        ).fetchone()
    conn.close()
    return tuple(row)


@pytest.mark.parametrize("on_stop", ["park", "cancel"])
def test_a_second_signal_kills_every_child_at_once(tmp_path: Path, on_stop: str) -> None:
    slow = rogue_daemon(tmp_path).replace("cancel_grace_s = 0.5", "cancel_grace_s = 20")
    with running_daemon(tmp_path, slow, daemon_lines=f'on_stop = "{on_stop}"\n') as daemon:
        task_id = daemon.submit("ignore-cancel")
        pids = daemon.wait_ready([task_id])
        daemon.proc.send_signal(signal.SIGTERM)
        # The drain has started and sent its cancel, which the child ignores: the ladder would
        # now wait 20 s before SIGTERM. The second signal must not wait for it.
        daemon.wait_log("proc.drain")
        daemon.wait_log("subagent.signal", task_id=task_id, rung="cancel", cause="drain")
        daemon.proc.send_signal(signal.SIGINT)
        assert daemon.proc.wait(timeout=10) == 0
        for pid in pids.values():
            assert not psutil.pid_exists(pid) or psutil.Process(pid).status() == psutil.STATUS_ZOMBIE
    if on_stop == "park":  # killed at once, and still parked: it goes on at the next start
        assert _journaled(tmp_path, task_id) == ("queued", None, 1, 0)
        return
    daemon = start_daemon(tmp_path, daemon.config)
    try:
        view = daemon.call("task.get", {"task_id": task_id})
        assert isinstance(view, dict)
        assert view["status"] == "cancelled"
        assert view["exit_code"] == 1  # a forced drain, unlike the orderly one above
    finally:
        assert daemon.stop() == 0


def test_a_daemon_refuses_a_state_dir_another_daemon_holds(tmp_path: Path) -> None:
    with running_daemon(tmp_path, rogue_daemon(tmp_path)) as daemon:
        other = tmp_path / "other"
        other.mkdir()
        config = other / "agentd.toml"
        config.write_text(
            daemon.config.read_text().replace(str(tmp_path / "agentd.sock"), str(other / "s.sock"))
        )
        second = subprocess.run(
            [sys.executable, "-m", "agentd", "serve", "--config", str(config)],
            capture_output=True,
            text=True,
            timeout=30,
        )
        assert second.returncode != 0
        assert "another agentd" in second.stdout + second.stderr
        assert "Traceback" not in second.stdout + second.stderr  # one clear log line


def test_a_sigterm_during_start_up_drains_once_the_daemon_is_up(tmp_path: Path) -> None:
    config = write_config(tmp_path, rogue_daemon(tmp_path))
    daemon = start_daemon(tmp_path, config, wait=False)
    deadline = time.monotonic() + 30
    while not any(line.get("event") == "config.loaded" for line in daemon.log()):
        assert daemon.proc.poll() is None
        assert time.monotonic() < deadline
        time.sleep(0.005)
    daemon.proc.send_signal(signal.SIGTERM)  # before recovery, before the socket, before READY
    assert daemon.proc.wait(timeout=30) == 0
    events = [line.get("event") for line in daemon.log()]
    assert "proc.drain" in events
    assert events[-1] == "proc.exit"
