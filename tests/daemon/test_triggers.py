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
from tests.support.as_user import NOGROUP, fork_as_nobody, outcomes
from tests.support.daemon import (
    FAST_SUPERVISION,
    FIXTURES,
    demo_mcp,
    running_daemon,
    scripted,
    start_daemon,
    write_config,
)
from tests.support.privilege import AS_ANOTHER_USER
from tests.support.triggers import trigger_tasks, trigger_views, wait_until

pytestmark = pytest.mark.processes
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


def _watcher_pids(tmp_path: Path, server: str) -> list[int]:
    return [int(p.stem.split("-")[1]) for p in (tmp_path / "control" / server).glob("started-*.json")]


def _nobody_scenario(name: str, path: str) -> dict[str, Any]:
    steps: list[tuple[str, Request[Any]]] = [
        ("list", TriggerListRequest()),
        ("pause", TriggerPauseRequest(params=TriggerRef(name=name))),
        ("status", StatusRequest()),
    ]
    return outcomes(path, steps)


@AS_ANOTHER_USER
def test_triggers_through_the_daemon_and_the_cli(tmp_path: Path) -> None:
    tmp_path.chmod(0o755)
    files = _control(tmp_path, "files", uris=["file:///srv/a"])
    _control(tmp_path, "flaky", mode="die")
    _control(tmp_path, "other", uris=["other://y"])
    body = _body(tmp_path, INBOX + FLAKY)
    with running_daemon(tmp_path, body, daemon_lines=f'socket_group = "{NOGROUP}"\n') as daemon:
        daemon.wait_log("trigger.armed", server="files")
        # The synthetic delivery after arming, then a change: two tasks that run to completion.
        wait_until(lambda: len(trigger_tasks(daemon, "inbox")) == 1, "the synthetic delivery's task", daemon)
        _emit(files, ["file:///srv/a"], 1)
        tasks = wait_until(
            lambda: len(t := trigger_tasks(daemon, "inbox")) == 2 and t, "the change's task", daemon
        )
        assert [(t["trigger"], t["uri"]) for t in tasks] == [("inbox", "file:///srv/a")] * 2
        done = daemon.wait(tasks[1]["task_id"])
        assert done.status is not None and done.status.value == "completed", done
        assert done.trigger == "inbox" and done.uri == "file:///srv/a"
        shown = daemon.cli("status", tasks[1]["task_id"])
        assert "trigger inbox file:///srv/a" in shown.stdout

        # A watcher that keeps dying: failed after restart_max restarts, and says so everywhere.
        wait_until(lambda: trigger_views(daemon)["flaky"]["state"] == "failed", "flaky failed", daemon)
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
        wait_until(lambda: not list(files.glob("emit-*.json")), "the change sent", daemon)
        time.sleep(0.3)
        assert len(trigger_tasks(daemon, "inbox")) == 2
        assert daemon.cli("triggers", "resume", "inbox", "--json").returncode == 0
        wait_until(lambda: len(trigger_tasks(daemon, "inbox")) == 3, "the resume's delivery", daemon)
        missing = daemon.cli("triggers", "restart", "nope")
        assert missing.returncode == 1 and "no trigger 'nope'" in missing.stderr

        # Another uid sees nothing and changes nothing.
        seen = fork_as_nobody(tmp_path, "inbox", "agentd.sock", [], _nobody_scenario)
        assert seen["list"]["code"] == FORBIDDEN and seen["pause"]["code"] == FORBIDDEN
        # Its status says nothing of the operator's triggers, not even that one failed.
        assert (seen["status"]["result"]["triggers"], seen["status"]["result"]["failed_triggers"]) == ({}, [])
        assert trigger_views(daemon)["inbox"]["state"] == "armed"

        # A reload removes flaky and adds other; the files watcher keeps running.
        (files_pid,) = _watcher_pids(tmp_path, "files")
        write_config(tmp_path, body.replace(FLAKY, OTHER), daemon=f'socket_group = "{NOGROUP}"\n')
        daemon.proc.send_signal(signal.SIGHUP)
        wait_until(lambda: set(trigger_views(daemon)) == {"inbox", "other"}, "the reload", daemon)
        wait_until(lambda: trigger_views(daemon)["other"]["state"] == "armed", "other armed", daemon)
        assert _watcher_pids(tmp_path, "files") == [files_pid]
        os.kill(files_pid, 0)  # still alive
        wait_until(lambda: len(trigger_tasks(daemon, "other")) == 1, "other's synthetic delivery", daemon)
        listed = daemon.cli("list", "--trigger", "other", "--json")
        assert listed.returncode == 0, listed.stderr
        assert [json.loads(line)["trigger"] for line in listed.stdout.splitlines()] == ["other"]
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
        before = wait_until(
            lambda: len(t := trigger_tasks(daemon, "inbox")) == 3 and t, "three deliveries", daemon
        )
        daemon.proc.kill()
        daemon.proc.wait(timeout=10)
    finally:
        if daemon.proc.poll() is None:
            daemon.proc.kill()
            daemon.proc.wait()
    (files / "uris").write_text("".join(u + "\n" for u in uris))
    with running_daemon(tmp_path, body) as second:
        # Re-armed: one synthetic delivery per URI, after the journaled ones, which each run once.
        after = wait_until(
            lambda: len(t := trigger_tasks(second, "inbox")) == 6 and t, "the re-arming's deliveries", second
        )
        for view in after:
            finished = second.wait(view["task_id"], timeout_s=120)
            assert finished.status is not None and finished.status.value == "completed", finished
        ids = [t["task_id"] for t in after]
        assert len(set(ids)) == 6 and {t["task_id"] for t in before} <= set(ids)
        assert sorted(t["uri"] for t in after) == sorted(uris * 2)
        time.sleep(0.5)
        assert len(trigger_tasks(second, "inbox")) == 6
        views = trigger_views(second)
        assert views["inbox"]["state"] == "armed" and views["inbox"]["tasks_started"] == 6
        assert views["other"]["state"] == "unsupported"
