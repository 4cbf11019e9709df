"""The spawn window with a real daemon and a real zygote: a burst boots K at a time, in submit
order, and loses nothing — not when a waiting task is cancelled, nor when the zygote dies."""

from __future__ import annotations

import os
import signal
import time
from pathlib import Path

import psutil
import pytest

from protocol.result import TerminalStatus as S
from tests.support.daemon import FAST_SUPERVISION, Daemon, rogue_command, running_daemon, scripted
from tests.support.zygote import PATIENT_PINGS, wait_zygote_state, zygote_pid

pytestmark = pytest.mark.processes

BURST = 12
WINDOW = 2


def quick_model(tmp_path: Path) -> str:
    # A model that thinks for a moment, so the burst's children overlap.
    return scripted("m", [{"text": "done", "delay_s": 0.3}], tmp_path) + '[defaults]\nmodel = "m"\n'


def spawns(daemon: Daemon) -> list[dict[str, object]]:
    return [line for line in daemon.log() if line.get("event") == "subagent.spawn"]


def test_a_burst_boots_at_most_the_window_at_once_in_submit_order_and_every_task_completes(
    tmp_path: Path,
) -> None:
    config = quick_model(tmp_path) + FAST_SUPERVISION + f"spawn_window = {WINDOW}\n"
    lines = f"max_concurrent_tasks = {BURST}\n"
    with running_daemon(
        tmp_path, config.replace("missed_pongs = 3", "missed_pongs = 100"), daemon_lines=lines
    ) as d:
        wait_zygote_state(d, "warm")
        task_ids = [d.submit(f"task {i}") for i in range(BURST)]
        views = [d.wait(task_id, timeout_s=120) for task_id in task_ids]
        assert [v.status for v in views] == [S.COMPLETED] * BURST, [v.error for v in views]
        lines_ = spawns(d)
        assert [line["task_id"] for line in lines_] == task_ids  # admitted in the order acknowledged
        booting = [int(str(line["booting"])) for line in lines_]
        assert max(booting) == WINDOW, booting  # the window filled, and never overflowed
        assert {line["via"] for line in lines_} == {"zygote"}


def test_a_task_cancelled_while_it_waits_for_the_window_ends_without_spawning(tmp_path: Path) -> None:
    # A child that never reads its spawn frame never gets ready: it holds its place until killed.
    never_ready = rogue_command().replace('rogue_child.py"]', 'rogue_child.py", "--never-read"]')
    config = (
        quick_model(tmp_path) + FAST_SUPERVISION + "spawn_window = 1\nready_timeout_s = 30\n" + never_ready
    )
    with running_daemon(tmp_path, config, daemon_lines="max_concurrent_tasks = 4\n") as d:
        holder = d.submit("hold the only place")
        d.wait_log("subagent.spawn", task_id=holder)
        waiting = d.submit("wait for a place")
        started = time.monotonic()
        view = d.call("task.get", {"task_id": waiting})  # answered at once while it waits
        assert isinstance(view, dict) and view["state"] in ("queued", "starting")
        assert time.monotonic() - started < 5
        d.call("task.cancel", {"task_id": waiting})
        ended = d.wait(waiting, timeout_s=20)
        assert ended.status is S.CANCELLED
        assert [line["task_id"] for line in spawns(d)] == [holder]  # the waiter never spawned
        d.call("task.cancel", {"task_id": holder})
        assert d.wait(holder, timeout_s=30).status is S.CANCELLED
        # The place came back: a task submitted now spawns.
        again = d.submit("after the holder")
        d.wait_log("subagent.spawn", task_id=again)
        d.call("task.cancel", {"task_id": again})
        assert d.wait(again, timeout_s=30).status is S.CANCELLED


def test_a_zygote_that_dies_during_a_windowed_burst_loses_nothing(tmp_path: Path) -> None:
    config = quick_model(tmp_path) + PATIENT_PINGS + f"spawn_window = {WINDOW}\n"
    with running_daemon(tmp_path, config, daemon_lines=f"max_concurrent_tasks = {BURST}\n") as d:
        zygote = zygote_pid(d)
        wait_zygote_state(d, "warm")
        task_ids = [d.submit(f"task {i}") for i in range(BURST)]
        d.wait_log("subagent.spawn")  # the burst is under way, most of it still waiting for a place
        os.kill(zygote, signal.SIGKILL)
        views = [d.wait(task_id, timeout_s=180) for task_id in task_ids]
        assert [v.status for v in views] == [S.COMPLETED] * BURST, [v.error for v in views]
        lines_ = spawns(d)
        assert sorted(str(line["task_id"]) for line in lines_) == sorted(task_ids)  # each spawned once
        assert max(int(str(line["booting"])) for line in lines_) <= WINDOW
        assert not psutil.pid_exists(zygote) or psutil.Process(zygote).status() == psutil.STATUS_ZOMBIE
