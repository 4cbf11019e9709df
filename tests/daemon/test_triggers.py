"""Reactive triggers end to end through a real daemon (docs/triggers.md), with the protocol-speaking
test watcher (`tests/fixtures/fake_watcher.py`) as `supervision.watch_command`: a change becomes a
task carrying trigger and uri that runs; `agentd triggers` shows states (a flapping server
`failed`, also in daemon.status); pause/resume from the CLI; another uid is refused; a reload adds
and removes triggers without restarting an unchanged watcher; SIGTERM leaves no watcher behind;
a daemon kill -9 loses and doubles no journaled delivery. The real watcher and real MCP servers
are exercised by the end-to-end tests that come with `subagent.watch`."""

from __future__ import annotations

import json
import os
import signal
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from protocol.api import (
    FORBIDDEN,
    Request,
    StatusRequest,
    TriggerListRequest,
    TriggerPauseRequest,
    TriggerRef,
)
from tests.api.test_ownership import NOGROUP, _fork_as_nobody
from tests.support.as_user import outcomes
from tests.support.daemon import (
    FAST_SUPERVISION,
    FIXTURES,
    Daemon,
    demo_mcp,
    running_daemon,
    scripted,
    start_daemon,
    write_config,
)

pytestmark = pytest.mark.processes
WAIT_S = 30.0
# Short ladders and a frequent orphan sweep (it must spare the watchers), but a patient ping: six
# subagents and their MCP servers starting at once on a loaded 2-core machine answer late.
SUPERVISION = FAST_SUPERVISION.replace("missed_pongs = 3", "missed_pongs = 25")


def _body(tmp_path: Path, triggers: str, *, turns: list[dict[str, object]] | None = None) -> str:
    control = tmp_path / "control"
    control.mkdir(exist_ok=True)
    watch = f'watch_command = ["{sys.executable}", "{FIXTURES / "fake_watcher.py"}", "{control}"]\n'
    governor = "restart_backoff_initial_s = 0.05\nrestart_backoff_max_s = 0.2\nrestart_max = 2\n"
    return (
        scripted("m", turns or [{"text": "done"}], tmp_path)
        + '[defaults]\nmodel = "m"\n'
        + demo_mcp("files")
        + demo_mcp("flaky")
        + demo_mcp("other")
        + SUPERVISION
        + watch
        + governor
        + triggers
    )


INBOX = """
[[trigger]]
name = "inbox"
server = "files"
glob = "file:///srv/*"
instruction = "A file changed: {uri}. Say done."
debounce_ms = 100
max_wait_ms = 500
"""
FLAKY = """
[[trigger]]
name = "flaky"
server = "flaky"
uri = "flaky://x"
instruction = "never"
"""
OTHER = """
[[trigger]]
name = "other"
server = "other"
uri = "other://y"
instruction = "Other changed: {uri}."
"""


def _control(tmp_path: Path, server: str, *, mode: str = "normal", uris: list[str] | None = None) -> Path:
    path = tmp_path / "control" / server
    path.mkdir(parents=True, exist_ok=True)
    (path / "mode").write_text(mode)
    if uris is not None:
        (path / "uris").write_text("".join(u + "\n" for u in uris))
    return path


def _emit(control: Path, uris: list[str], n: int) -> None:
    tmp = control / f"tmp-{n}"
    tmp.write_text(json.dumps([{"uri": u, "etag": f"e{n}"} for u in uris]))
    tmp.rename(control / f"emit-{n:06d}.json")


def _until(check: Callable[[], Any], what: str, daemon: Daemon, timeout_s: float = WAIT_S) -> Any:
    deadline = time.monotonic() + timeout_s
    while not (value := check()):
        assert daemon.proc.poll() is None, f"the daemon exited:\n{daemon.log_path.read_text()[-3000:]}"
        assert time.monotonic() < deadline, (
            f"timed out waiting for {what}:\n{daemon.log_path.read_text()[-3000:]}"
        )
        time.sleep(0.05)
    return value


def _triggers(daemon: Daemon) -> dict[str, dict[str, Any]]:
    views = daemon.call("trigger.list")
    assert isinstance(views, list)
    return {v["name"]: v for v in views}


def _tasks(daemon: Daemon, trigger: str) -> list[dict[str, Any]]:
    views = daemon.call("task.list", {"limit": 1000})
    assert isinstance(views, list)
    return sorted((v for v in views if v.get("trigger") == trigger), key=lambda v: v["created_at"])


def _watcher_pids(tmp_path: Path, server: str) -> list[int]:
    return [int(p.stem.split("-")[1]) for p in (tmp_path / "control" / server).glob("started-*.json")]


def _nobody_scenario(name: str, path: str) -> dict[str, Any]:
    steps: list[tuple[str, Request[Any]]] = [
        ("list", TriggerListRequest()),
        ("pause", TriggerPauseRequest(params=TriggerRef(name=name))),
        ("status", StatusRequest()),
    ]
    return outcomes(path, steps)


def test_triggers_through_the_daemon_and_the_cli(tmp_path: Path) -> None:
    tmp_path.chmod(0o755)
    files = _control(tmp_path, "files", uris=["file:///srv/a"])
    _control(tmp_path, "flaky", mode="die")
    _control(tmp_path, "other", uris=["other://y"])
    body = _body(tmp_path, INBOX + FLAKY)
    with running_daemon(tmp_path, body, daemon_lines=f'socket_group = "{NOGROUP}"\n') as daemon:
        daemon.wait_log("trigger.armed", server="files")
        # The synthetic delivery after arming, then a change: two tasks that run to completion.
        _until(lambda: len(_tasks(daemon, "inbox")) == 1, "the synthetic delivery's task", daemon)
        _emit(files, ["file:///srv/a"], 1)
        tasks = _until(lambda: len(t := _tasks(daemon, "inbox")) == 2 and t, "the change's task", daemon)
        assert [(t["trigger"], t["uri"]) for t in tasks] == [("inbox", "file:///srv/a")] * 2
        done = daemon.wait(tasks[1]["task_id"])
        assert done.status is not None and done.status.value == "completed", done
        assert done.trigger == "inbox" and done.uri == "file:///srv/a"
        shown = daemon.cli("status", tasks[1]["task_id"])
        assert "trigger inbox file:///srv/a" in shown.stdout

        # A watcher that keeps dying: failed after restart_max restarts, and says so everywhere.
        _until(lambda: _triggers(daemon)["flaky"]["state"] == "failed", "flaky failed", daemon)
        assert len(_watcher_pids(tmp_path, "flaky")) == 3
        failed = daemon.wait_log("trigger.failed", server="flaky")
        assert failed["restarts"] == 2
        status = daemon.call("daemon.status")
        assert isinstance(status, dict)
        assert status["failed_triggers"] == ["flaky"] and status["triggers"] == {"armed": 1, "failed": 1}
        table = daemon.cli("triggers")
        assert table.returncode == 0, table.stderr
        assert table.stdout.splitlines()[0].split()[:3] == ["NAME", "SERVER", "URI/GLOB"]
        flaky_row = next(line for line in table.stdout.splitlines() if line.startswith("flaky"))
        assert "failed" in flaky_row and "exited with code 3" in flaky_row

        # Pause and resume from the CLI; resuming redelivers once per subscribed URI.
        assert daemon.cli("triggers", "pause", "inbox").stdout.strip() == "inbox: paused"
        _emit(files, ["file:///srv/a"], 2)
        _until(lambda: not list(files.glob("emit-*.json")), "the change sent", daemon)
        time.sleep(0.3)
        assert len(_tasks(daemon, "inbox")) == 2
        assert daemon.cli("triggers", "resume", "inbox", "--json").returncode == 0
        _until(lambda: len(_tasks(daemon, "inbox")) == 3, "the resume's delivery", daemon)
        missing = daemon.cli("triggers", "restart", "nope")
        assert missing.returncode == 1 and "no trigger 'nope'" in missing.stderr

        # Another uid sees nothing and changes nothing.
        seen = _fork_as_nobody(tmp_path, "inbox", "agentd.sock", [], _nobody_scenario)
        assert seen["list"]["code"] == FORBIDDEN and seen["pause"]["code"] == FORBIDDEN
        # Its status says nothing of the operator's triggers, not even that one failed.
        assert (seen["status"]["result"]["triggers"], seen["status"]["result"]["failed_triggers"]) == ({}, [])
        assert _triggers(daemon)["inbox"]["state"] == "armed"

        # A reload removes flaky and adds other; the files watcher keeps running.
        (files_pid,) = _watcher_pids(tmp_path, "files")
        write_config(tmp_path, body.replace(FLAKY, OTHER), daemon=f'socket_group = "{NOGROUP}"\n')
        daemon.proc.send_signal(signal.SIGHUP)
        _until(lambda: set(_triggers(daemon)) == {"inbox", "other"}, "the reload", daemon)
        _until(lambda: _triggers(daemon)["other"]["state"] == "armed", "other armed", daemon)
        assert _watcher_pids(tmp_path, "files") == [files_pid]
        os.kill(files_pid, 0)  # still alive
        _until(lambda: len(_tasks(daemon, "other")) == 1, "other's synthetic delivery", daemon)
    # running_daemon checked a clean drain (exit 0); the processes marker checks no watcher is left.


def test_a_daemon_kill_9_loses_and_doubles_no_journaled_delivery(tmp_path: Path) -> None:
    uris = [f"file:///srv/{i}" for i in range(3)]
    files = _control(tmp_path, "files", uris=[])
    _control(tmp_path, "other", mode="unsupported")
    # At the kill, the journaled deliveries are queued or starting; recovery requeues those.
    body = _body(
        tmp_path, INBOX + "max_inflight = 10\n" + OTHER, turns=[{"text": "done", "delay_s": 0.2}] * 20
    )
    config = write_config(tmp_path, body)
    daemon = start_daemon(tmp_path, config)
    try:
        daemon.wait_log("trigger.armed", server="files")
        _emit(files, uris, 1)
        before = _until(lambda: len(t := _tasks(daemon, "inbox")) == 3 and t, "three deliveries", daemon)
        daemon.proc.kill()
        daemon.proc.wait(timeout=10)
    finally:
        if daemon.proc.poll() is None:
            daemon.proc.kill()
            daemon.proc.wait()
    (files / "uris").write_text("".join(u + "\n" for u in uris))
    with running_daemon(tmp_path, body) as second:
        # Re-armed: one synthetic delivery per URI, after the journaled ones, which each run once.
        after = _until(
            lambda: len(t := _tasks(second, "inbox")) == 6 and t, "the re-arming's deliveries", second
        )
        for view in after:
            finished = second.wait(view["task_id"], timeout_s=120)
            assert finished.status is not None and finished.status.value == "completed", finished
        ids = [t["task_id"] for t in after]
        assert len(set(ids)) == 6 and {t["task_id"] for t in before} <= set(ids)
        assert sorted(t["uri"] for t in after) == sorted(uris * 2)
        time.sleep(0.5)
        assert len(_tasks(second, "inbox")) == 6
        views = _triggers(second)
        assert views["inbox"]["state"] == "armed" and views["inbox"]["tasks_started"] == 6
        assert views["other"]["state"] == "unsupported"
