"""Subagents run below the daemon: `supervision.batch_scheduling` (SCHED_BATCH) and
`supervision.subagent_nice` (nice levels under the daemon's), forked or exec'd, with their own
process group in the daemon's session; the daemon itself keeps SCHED_OTHER at its own nice; `false`
and `0` leave every child as the daemon is."""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

import psutil
import pytest

from protocol.result import TerminalStatus as S
from tests.support.daemon import Daemon, running_daemon, scripted
from tests.support.zygote import SLOW, forked_from_zygote, wait_zygote_state

pytestmark = pytest.mark.processes


def body(tmp_path: Path, extra: str = "") -> str:
    return scripted("m", SLOW, tmp_path) + f'[defaults]\nmodel = "m"\n[supervision]\n{extra}'


@dataclass(frozen=True)
class Priority:
    policy: int
    nice: int
    session: int
    group: int

    @staticmethod
    def of(pid: int) -> Priority:
        return Priority(
            os.sched_getscheduler(pid), psutil.Process(pid).nice(), os.getsid(pid), os.getpgid(pid)
        )


def run_one(daemon: Daemon) -> tuple[int, Priority, bool]:
    """A live subagent's pid, priority and whether it was forked from the zygote (then cancels it)."""
    task_id = daemon.submit("slow")
    pid = daemon.wait_ready([task_id])[task_id]
    seen, forked = Priority.of(pid), forked_from_zygote(pid)
    daemon.call("task.cancel", {"task_id": task_id})
    assert daemon.wait(task_id).status is S.CANCELLED
    return pid, seen, forked


def below_the_daemon(daemon: Daemon, pid: int, seen: Priority, nice: int = 19) -> None:
    ours = Priority.of(daemon.pid)
    assert ours.policy == os.SCHED_OTHER
    assert seen.policy == os.SCHED_BATCH
    assert seen.nice == min(19, ours.nice + nice)  # the default: as far below as nice goes
    # The daemon's session (the kernel weighs the tree as one), but a process group of its own:
    # every rung of the kill ladder signals that group.
    assert seen.session == ours.session == daemon.pid
    assert seen.group == pid


@pytest.mark.alone  # the zygote must warm up within zygote_wait_s (30 s)
def test_the_zygote_and_its_subagents_run_below_the_daemon(tmp_path: Path) -> None:
    with running_daemon(tmp_path, body(tmp_path)) as daemon:
        wait_zygote_state(daemon, "warm")
        zygote = next(p for p in psutil.Process(daemon.pid).children() if p.name() == "agentd-zygote")
        seen = Priority.of(zygote.pid)
        # Under SCHED_BATCH, which its forks inherit, but at the daemon's nice: its forks keep pace.
        assert (seen.policy, seen.nice) == (os.SCHED_BATCH, Priority.of(daemon.pid).nice)
        assert (seen.session, seen.group) == (daemon.pid, zygote.pid)
        pid, seen, forked = run_one(daemon)
        assert forked
        below_the_daemon(daemon, pid, seen)


def test_exec_d_subagents_run_below_the_daemon(tmp_path: Path) -> None:
    with running_daemon(tmp_path, body(tmp_path, 'spawner = "exec"\nsubagent_nice = 7\n')) as daemon:
        pid, seen, forked = run_one(daemon)
        assert not forked
        below_the_daemon(daemon, pid, seen, nice=7)


def test_false_and_0_leave_children_as_the_daemon_is(tmp_path: Path) -> None:
    extra = "batch_scheduling = false\nsubagent_nice = 0\n"
    with running_daemon(tmp_path, body(tmp_path, extra)) as daemon:
        pid, seen, _ = run_one(daemon)
        ours = Priority.of(daemon.pid)
        assert (seen.policy, seen.nice, seen.session, seen.group) == (
            os.SCHED_OTHER,
            ours.nice,
            ours.session,
            pid,
        )
