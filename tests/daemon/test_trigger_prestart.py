"""A trigger's task prestarted while its URI's debounce window is open (a trigger's latency): the real
daemon, the real watcher, the SDK fixture server over stdio, the real subagent talking to `FakeLLM`.

When a window opens the daemon forks the task's subagent and sends it its held payload; the child
opens its model client and hinted tools and waits. Nothing of the task happens before the delivery
is journaled: no task in the journal, no model request (not even a connection), no MCP server
started. Once the window closes the task is journaled with the ids the child was parked with, its
run takes that very process, and only then is it told to go. A window that ends without a task
(the trigger paused) kills and reaps its child; a delivery that would wait at `max_inflight` and
a trigger with `prestart = false` park none; a daemon killed while a child is parked leaves no
process and no task behind. The `processes` marker checks that nothing leaks.
"""

from __future__ import annotations

import dataclasses
import json
import sys
import threading
import time
from pathlib import Path
from typing import Any

import psutil
import pytest

from tests.fixtures import watch_changes
from tests.fixtures.mcp_watch_driver import SERVED_LOG
from tests.support.daemon import (
    FAST_SUPERVISION,
    FIXTURES,
    Daemon,
    running_daemon,
    start_daemon,
    write_config,
)
from tests.support.fake_llm import Behaviour, FakeLLM, Recorded, Respond, chat
from tests.support.triggers import trigger_tasks, trigger_views, wait_until

pytestmark = pytest.mark.processes
WAIT_S = 120.0  # the watcher imports `mcp` before it arms, on a loaded 2-core machine
SUPERVISION = FAST_SUPERVISION.replace("missed_pongs = 3", "missed_pongs = 25")
# Long windows: the test looks at a parked child while its window is still open.
WINDOW_MS = 3000


def _body(model: FakeLLM, state: Path) -> str:
    argv = [sys.executable, str(FIXTURES / "mcp_watch_2025.py"), "--resources", "4", "--state", str(state)]

    def trigger(name: str, item: int, extra: str = "") -> str:
        return (
            f'[[trigger]]\nname = "{name}"\nserver = "files"\nuri = "watch://item/{item}"\n'
            f'instruction = "{name} changed: {{uri}}. Say done."\n'
            f"debounce_ms = {WINDOW_MS}\nmax_wait_ms = {2 * WINDOW_MS}\nmax_inflight = 1\n{extra}"
        )

    return (
        f'[intelligence.m]\nkind = "openai"\nbase_url = "{model.base_url}"\nmodel = "m"\n'
        '[defaults]\nmodel = "m"\n'
        f"[mcp.files]\ncommand = {json.dumps(argv)}\ntrust = []\n"
        + SUPERVISION
        + trigger("inbox", 0)
        + trigger("paused", 1)
        + trigger("busy", 2)
        + trigger("plain", 3, "prestart = false\n")
    )


def _parked(daemon: Daemon, known: set[str]) -> list[dict[str, Any]]:
    """The daemon's prestart lines for task ids not in `known`."""
    return [
        line
        for line in daemon.log()
        if line.get("event") == "subagent.spawn" and line.get("prestart") and line.get("task_id") not in known
    ]


def _served(state: Path) -> list[float]:
    """When each instance of the fixture server began serving (CLOCK_MONOTONIC)."""
    return [float(line.split()[1]) for line in (state / SERVED_LOG).read_text().splitlines()]


def _gone(pid: int) -> bool:
    try:
        return bool(psutil.Process(pid).status() == psutil.STATUS_ZOMBIE)
    except psutil.NoSuchProcess:
        return True


def _settled(daemon: Daemon) -> list[str]:
    """Every trigger task so far, each waited for to its end; their ids."""
    ids = []
    for name in ("inbox", "paused", "busy", "plain"):
        for view in trigger_tasks(daemon, name):
            daemon.wait(view["task_id"], timeout_s=WAIT_S)
            ids.append(view["task_id"])
    return ids


def _mentions(request: Recorded, text: str) -> bool:
    return text in json.dumps(request.json)


def test_a_prestarted_child_does_nothing_until_its_task_is_journaled(tmp_path: Path) -> None:
    state = tmp_path / "state"
    state.mkdir()
    slow = threading.Event()

    def choose(request: Recorded) -> Behaviour:
        # `busy`'s first task answers slowly while `slow` is set: it holds the trigger's one slot.
        if slow.is_set() and _mentions(request, "busy changed"):
            slow.clear()
            return dataclasses.replace(chat("done"), delay_s=3.0)
        return chat("done")

    offset = time.time() - time.monotonic()
    with FakeLLM(Respond(choose)) as model, running_daemon(tmp_path, _body(model, state)) as daemon:
        wait_until(lambda: trigger_views(daemon)["inbox"]["state"] == "armed", "armed", daemon, WAIT_S)
        # The synthetic deliveries after arming: one task per trigger, run to their end.
        wait_until(
            lambda: sum(len(trigger_tasks(daemon, n)) for n in trigger_views(daemon)) == 4,
            "4 tasks",
            daemon,
            WAIT_S,
        )
        known = set(_settled(daemon))
        plain_ids = {t["task_id"] for t in trigger_tasks(daemon, "plain")}

        # -- a change to inbox's URI: its child is parked while the window is open ------------
        requests, connections, served = len(model.requests), model.connections, len(_served(state))
        watch_changes.bump(state, "watch://item/0")
        park = wait_until(lambda: _parked(daemon, known), "inbox's prestarted child", daemon)[0]
        task_id, pid = str(park["task_id"]), int(park["pid"])
        child = psutil.Process(pid)
        assert child.ppid() == daemon.proc.pid  # the daemon's own child, like any subagent
        # It has read its payload and started its control thread, and waits for `ctrl/go`.
        wait_until(lambda: child.num_threads() >= 2, "the parked child prepared", daemon)
        time.sleep(0.3)  # given time to misbehave, within the window
        if task_id not in {t["task_id"] for t in trigger_tasks(daemon, "inbox")}:  # the window is still open
            assert len(model.requests) == requests and model.connections == connections
            assert len(_served(state)) == served  # no MCP server started for the task
            assert child.is_running() and child.status() != psutil.STATUS_ZOMBIE

        # -- the window closes: the task is journaled with the parked ids and runs in that child
        task = wait_until(
            lambda: next((t for t in trigger_tasks(daemon, "inbox") if t["task_id"] == task_id), None),
            "the task journaled with the parked ids",
            daemon,
        )
        done = daemon.wait(task_id, timeout_s=WAIT_S)
        assert done.status is not None and done.status.value == "completed", done
        assert done.pid == pid
        first = next(r for r in model.requests[requests:] if _mentions(r, "inbox changed"))
        assert first.at + offset > task["created_at"]  # asked only once the task was journaled
        later = [t + offset for t in _served(state)[served:]]
        assert all(t > task["created_at"] for t in later)  # its server, if any, started after too
        assert _gone(pid)
        known.add(task_id)

        # -- a window that ends without a task (its trigger paused): the child is killed and reaped
        watch_changes.bump(state, "watch://item/1")
        park = wait_until(lambda: _parked(daemon, known), "paused's prestarted child", daemon)[0]
        paused_id, paused_pid = str(park["task_id"]), int(park["pid"])
        daemon.call("trigger.pause", {"name": "paused"})
        wait_until(lambda: _gone(paused_pid), "the discarded child reaped", daemon, 15.0)
        daemon.wait_log("subagent.exit", prestart=True, task_id=paused_id)
        known.add(paused_id)

        # -- max_inflight full when the window opens: nothing is parked, the delivery waits ------
        slow.set()
        watch_changes.bump(state, "watch://item/2")
        first_busy = wait_until(
            lambda: [t for t in trigger_tasks(daemon, "busy") if t["task_id"] not in known],
            "busy's task",
            daemon,
        )[0]
        known.add(first_busy["task_id"])
        watch_changes.bump(state, "watch://item/2")  # while the first holds the one slot
        second = wait_until(
            lambda: [t for t in trigger_tasks(daemon, "busy") if t["task_id"] not in known],
            "busy's second task, once the first ended",
            daemon,
        )[0]
        daemon.wait(second["task_id"], timeout_s=WAIT_S)
        assert all(line["task_id"] != second["task_id"] for line in _parked(daemon, set()))

        # -- prestart = false parks nothing -------------------------------------------------------
        watch_changes.bump(state, "watch://item/3")
        plain = wait_until(
            lambda: [t for t in trigger_tasks(daemon, "plain") if t["task_id"] not in known],
            "plain's task",
            daemon,
        )[0]
        daemon.wait(plain["task_id"], timeout_s=WAIT_S)
        plain_ids.add(plain["task_id"])
        assert not plain_ids & {line["task_id"] for line in _parked(daemon, set())}


def test_a_daemon_killed_while_a_child_is_parked_leaves_no_process_and_no_task(tmp_path: Path) -> None:
    state = tmp_path / "state"
    state.mkdir()
    with FakeLLM() as model:
        config = write_config(tmp_path, _body(model, state))
        daemon = start_daemon(tmp_path, config)
        try:
            wait_until(lambda: trigger_views(daemon)["inbox"]["state"] == "armed", "armed", daemon, WAIT_S)
            wait_until(
                lambda: sum(len(trigger_tasks(daemon, n)) for n in trigger_views(daemon)) == 4,
                "4 tasks",
                daemon,
            )
            known = set(_settled(daemon))
            watch_changes.bump(state, "watch://item/0")
            park = wait_until(lambda: _parked(daemon, known), "a prestarted child", daemon)[0]
            child = psutil.Process(int(park["pid"]))
            wait_until(lambda: child.num_threads() >= 2, "the parked child prepared", daemon)
            daemon.proc.kill()
            daemon.proc.wait(timeout=10)
        finally:
            if daemon.proc.poll() is None:
                daemon.proc.kill()
                daemon.proc.wait()
        # PDEATHSIG (and its closed control channel) end it at once; it ran nothing.
        deadline = time.monotonic() + 10
        while not _gone(child.pid):
            assert time.monotonic() < deadline, "the parked child outlived its daemon"
            time.sleep(0.05)
        with running_daemon(tmp_path, _body(model, state)) as second:
            wait_until(lambda: trigger_views(second)["inbox"]["state"] == "armed", "re-armed", second, WAIT_S)
            # The parked ids were never journaled: the re-arming's synthetic delivery covers the URI.
            inbox = wait_until(
                lambda: len(t := trigger_tasks(second, "inbox")) == 2 and t, "the synthetic delivery", second
            )
            assert park["task_id"] not in {t["task_id"] for t in inbox}
            for view in inbox:
                second.wait(view["task_id"], timeout_s=WAIT_S)
