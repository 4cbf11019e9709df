"""`supervision.batch_scheduling`: subagents run under SCHED_BATCH, forked or exec'd, and their own
children inherit it; the daemon itself keeps SCHED_OTHER; `false` leaves every child as it was."""

from __future__ import annotations

import os
from pathlib import Path

import psutil
import pytest

from protocol.result import TerminalStatus as S
from tests.daemon.test_zygote import SLOW, forked_from_zygote, wait_zygote_state
from tests.support.daemon import Daemon, running_daemon, scripted

pytestmark = pytest.mark.processes


def body(tmp_path: Path, extra: str = "") -> str:
    return scripted("m", SLOW, tmp_path) + f'[defaults]\nmodel = "m"\n[supervision]\n{extra}'


def run_one(daemon: Daemon) -> tuple[int, bool]:
    """A live subagent's scheduling policy and whether it was forked from the zygote (then cancels it)."""
    task_id = daemon.submit("slow")
    pid = daemon.wait_ready([task_id])[task_id]
    policy, forked = os.sched_getscheduler(pid), forked_from_zygote(pid)
    daemon.call("task.cancel", {"task_id": task_id})
    assert daemon.wait(task_id).status is S.CANCELLED
    return policy, forked


@pytest.mark.alone  # the zygote must warm up within zygote_wait_s (30 s)
def test_forked_subagents_and_the_zygote_run_as_batch_and_the_daemon_does_not(tmp_path: Path) -> None:
    with running_daemon(tmp_path, body(tmp_path)) as daemon:
        wait_zygote_state(daemon, "warm")
        zygote = next(p for p in psutil.Process(daemon.pid).children() if p.name() == "agentd-zygote")
        assert os.sched_getscheduler(zygote.pid) == os.SCHED_BATCH
        policy, forked = run_one(daemon)
        assert forked and policy == os.SCHED_BATCH  # inherited from the zygote: nothing set per spawn
        assert os.sched_getscheduler(daemon.pid) == os.SCHED_OTHER


def test_exec_d_subagents_run_as_batch(tmp_path: Path) -> None:
    with running_daemon(tmp_path, body(tmp_path, 'spawner = "exec"\n')) as daemon:
        policy, forked = run_one(daemon)
        assert not forked and policy == os.SCHED_BATCH


def test_batch_scheduling_false_leaves_children_as_they_were(tmp_path: Path) -> None:
    with running_daemon(tmp_path, body(tmp_path, "batch_scheduling = false\n")) as daemon:
        policy, _ = run_one(daemon)
        assert policy == os.SCHED_OTHER
