"""Reactive triggers end to end with every part real: the daemon, the real watcher
(`python -m subagent.watch`, the default `supervision.watch_command`), the SDK-built fixture MCP
servers of both eras over stdio (`tests/fixtures/mcp_watch_2025.py`, `mcp_watch_2026.py`), and
tasks that read the changed resource with `resource_read` (notify, then read).

One daemon, one story, so the watchers' start-up (importing `mcp`) is paid once: arming sends one
synthetic delivery per URI on both eras; a `route = "continue"` trigger's warm session takes one
turn per change in one task; 200 changes to one URI within the debounce window become
one task, which reads the newest state; a glob picks up a resource created after arming; a server
without subscription support is `unsupported` and not restarted; a server that keeps exiting
makes its trigger `failed` past the governor's limit; `kill -9` of a watcher makes the
governor re-arm it, with one synthetic delivery per URI; the drain leaves no process behind (the
`processes` marker checks it)."""

from __future__ import annotations

import json
import os
import signal
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import psutil
import pytest

from tests.fixtures import watch_changes
from tests.support.daemon import FAST_SUPERVISION, FIXTURES, Daemon, running_daemon
from tests.support.triggers import trigger_tasks, trigger_views, wait_until

pytestmark = pytest.mark.processes
WAIT_S = 90.0  # a watcher imports `mcp` before it arms: ~10 s on a loaded 2-core machine
INBOX_URIS = [f"watch://item/{i}" for i in range(3)]
SUPERVISION = FAST_SUPERVISION.replace("missed_pongs = 3", "missed_pongs = 25") + (
    "restart_backoff_initial_s = 0.05\nrestart_backoff_max_s = 0.2\nrestart_max = 2\n"
)


def _role(match: str, server: str, uri: str) -> dict[str, object]:
    # The task reads the resource it was told about and answers with what it read.
    read = {"name": "resource_read", "arguments": {"uri": uri, "server": server}}
    return {"match": match, "turns": [{"tool_calls": [read]}, {"text": "{last_tool_result}"}]}


def _body(tmp_path: Path, files_state: Path, feed_state: Path) -> str:
    roles = [_role(f'File changed: "{u}"\\.', "files", u) for u in [*INBOX_URIS, "watch://item/9"]]
    roles.append(_role("Feed changed", "feed", "watch://item/0"))
    # The warm session: every injection is one turn that reads the feed and answers.
    warm = _role("You watch the ops feed", "feed", "watch://item/1")
    roles.append({**warm, "after_end": "cycle"})
    script = tmp_path / "model.json"
    script.write_text(json.dumps({"model": "scripted-m", "turns": [{"text": "unexpected"}], "roles": roles}))

    def server(name: str, fixture: str, *args: str) -> str:
        argv = [sys.executable, str(FIXTURES / fixture), *args]
        return f"[mcp.{name}]\ncommand = {json.dumps(argv)}\ntrust = []\n"

    return (
        f'[intelligence.m]\nkind = "scripted"\nscript = "{script}"\n[defaults]\nmodel = "m"\n'
        + server("files", "mcp_watch_2025.py", "--resources", "3", "--state", str(files_state))
        + server("feed", "mcp_watch_2026.py", "--resources", "2", "--state", str(feed_state))
        + server("deaf", "mcp_watch_2025.py", "--no-subscribe")
        + server("flaky", "mcp_watch_2025.py", "--exit-after", "0.1")
        + SUPERVISION
        + """
[[trigger]]
name = "inbox"
server = "files"
glob = "watch://item/*"
instruction = "File changed: {uri}. Read it."
debounce_ms = 300
max_inflight = 10

[[trigger]]
name = "feed"
server = "feed"
uri = "watch://item/0"
instruction = "Feed changed: {uri}. Read it."
debounce_ms = 100

[[trigger]]
name = "ops"
server = "feed"
uri = "watch://item/1"
route = "continue"
instruction = "You watch the ops feed ({uri}). On each change, read it and say what is new."
debounce_ms = 100

[[trigger]]
name = "deaf"
server = "deaf"
uri = "watch://item/0"
instruction = "never"

[[trigger]]
name = "flaky"
server = "flaky"
uri = "watch://item/0"
instruction = "never"
"""
    )


def _wait(check: Callable[[], Any], what: str, daemon: Daemon) -> Any:
    return wait_until(check, what, daemon, timeout_s=WAIT_S)


def _turns(daemon: Daemon) -> list[dict[str, Any]]:
    return [
        line for line in daemon.log() if line.get("event") == "session.turn" and line.get("trigger") == "ops"
    ]


def _answers(daemon: Daemon, tasks: list[dict[str, Any]]) -> list[str]:
    out = []
    for view in tasks:
        done = daemon.wait(view["task_id"], timeout_s=WAIT_S)
        assert done.status is not None and done.status.value == "completed", done
        assert isinstance(done.result, str), done
        out.append(done.result)
    return out


def _watcher_of(daemon: Daemon, state: Path) -> psutil.Process:
    """The watcher process whose MCP server follows `state`."""
    for proc in psutil.Process(daemon.proc.pid).children():
        if "subagent.watch" not in " ".join(proc.cmdline()):
            continue
        if any(str(state) in " ".join(c.cmdline()) for c in proc.children(recursive=True)):
            return proc
    raise AssertionError(f"no watcher holds the server of {state}")


def test_real_watchers_turn_resource_changes_into_tasks_that_read_them(tmp_path: Path) -> None:
    files_state, feed_state = tmp_path / "files-state", tmp_path / "feed-state"
    files_state.mkdir()
    feed_state.mkdir()
    with running_daemon(tmp_path, _body(tmp_path, files_state, feed_state)) as daemon:
        views = _wait(
            lambda: (
                (t := trigger_views(daemon))["inbox"]["state"] == "armed"
                and t["feed"]["state"] == "armed"
                and t["deaf"]["state"] == "unsupported"
                and t
            ),
            "both eras armed and the deaf server unsupported",
            daemon,
        )
        assert views["inbox"]["subscribed"] == 3 and views["feed"]["subscribed"] == 1
        assert views["ops"]["route"] == "continue" and views["ops"]["subscribed"] == 1

        # Arming: one synthetic "possibly changed" per URI, each a task that reads the resource.
        inbox = _wait(
            lambda: len(t := trigger_tasks(daemon, "inbox")) == 3 and t, "the synthetic deliveries", daemon
        )
        assert sorted(t["uri"] for t in inbox) == INBOX_URIS
        assert sorted(_answers(daemon, inbox)) == [f"{u} v1" for u in INBOX_URIS]
        feed = _wait(lambda: trigger_tasks(daemon, "feed"), "the 2026 server's synthetic delivery", daemon)
        assert _answers(daemon, feed) == ["watch://item/0 v1"]

        # A burst of 200 changes to one URI: one delivery, whose task reads the newest state.
        watch_changes.bump(files_state, "watch://item/1", times=200)
        burst = _wait(
            lambda: len(t := trigger_tasks(daemon, "inbox")) == 4 and t[3:], "the burst's task", daemon
        )
        assert burst[0]["uri"] == "watch://item/1"
        assert _answers(daemon, burst) == ["watch://item/1 v201"]
        watch_changes.bump(feed_state, "watch://item/0")
        feed = _wait(
            lambda: len(t := trigger_tasks(daemon, "feed")) == 2 and t[1:], "the 2026 change's task", daemon
        )
        assert _answers(daemon, feed) == ["watch://item/0 v2"]

        # The warm session: the synthetic delivery started it; each change is one more turn of
        # the same task (its context kept), never a new task.
        _wait(lambda: len(_turns(daemon)) == 1, "the warm session's first turn", daemon)
        for n in (2, 3):
            watch_changes.bump(feed_state, "watch://item/1")
            _wait(lambda n=n: len(_turns(daemon)) == n, f"the warm session's turn {n}", daemon)  # type: ignore[misc]
        turns = _turns(daemon)
        (session,) = trigger_tasks(daemon, "ops")
        assert {t["task_id"] for t in turns} == {session["task_id"]} and session["state"] == "running"
        assert [(t["uri"], t["status"], t["injections"]) for t in turns] == [
            ("watch://item/1", "completed", 1)
        ] * 3

        # A resource created after arming is picked up by the glob.
        watch_changes.create(files_state, "watch://item/9")
        new = _wait(
            lambda: len(t := trigger_tasks(daemon, "inbox")) == 5 and t[4:], "the new resource's task", daemon
        )
        assert new[0]["uri"] == "watch://item/9" and _answers(daemon, new) == ["watch://item/9 v1"]
        _wait(lambda: trigger_views(daemon)["inbox"]["subscribed"] == 4, "four URIs subscribed", daemon)

        # kill -9 of the watcher: the governor re-arms it, and every URI gets one synthetic delivery.
        watcher = _watcher_of(daemon, files_state)
        os.kill(watcher.pid, signal.SIGKILL)
        again = _wait(
            lambda: len(t := trigger_tasks(daemon, "inbox")) == 9 and t[5:],
            "the re-arming's deliveries",
            daemon,
        )
        assert sorted(t["uri"] for t in again) == [*INBOX_URIS, "watch://item/9"]
        assert _watcher_of(daemon, files_state).pid != watcher.pid
        assert sorted(_answers(daemon, again)) == [
            "watch://item/0 v1",
            "watch://item/1 v201",
            "watch://item/2 v1",
            "watch://item/9 v1",
        ]
        time.sleep(0.5)  # nothing more arrives: no doubled delivery
        views = trigger_views(daemon)
        assert len(trigger_tasks(daemon, "inbox")) == 9 and views["inbox"]["state"] == "armed"
        assert views["deaf"]["state"] == "unsupported" and views["deaf"]["tasks_started"] == 0
        # The server that exits at once: the watcher loses its session, the governor restarts it
        # twice (restart_max), then gives up until a reload or `agentd triggers restart`.
        flaky = _wait(
            lambda: (t := trigger_views(daemon)["flaky"])["state"] == "failed" and t, "flaky failed", daemon
        )
        assert "exited with code 6" in flaky["last_error"]
        assert daemon.call("daemon.status")["failed_triggers"] == ["flaky"]  # type: ignore[index]
        assert (
            sum(1 for line in daemon.log_path.read_text().splitlines() if '"trigger.unsupported"' in line)
            == 1
        )
