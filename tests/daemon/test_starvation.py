"""Starved or stuck, against the real daemon (docs/design.md §6): a child that misses its pings
because it is runnable but kept off the CPU is given more time and ends normally; kept off past its
grace, it is stopped as `starved`, not `stuck`. (A SIGSTOPped child is still stuck:
test_chaos.py::test_a_sigstopped_real_subagent_is_detected_as_stuck_and_killed.)
"""

from __future__ import annotations

import os
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from protocol.result import TerminalStatus as S
from tests.support.daemon import Daemon, running_daemon
from tests.support.rogue_daemon import rogue_daemon
from tests.support.starving_cgroup import StarvingCgroup, starving_cgroup

pytestmark = pytest.mark.processes

# Pings every 0.2 s and 3 missed (rogue_daemon): without the starvation check a child kept off the
# CPU this long would be stuck five times over.
STARVED_FOR_S = 3.0


@contextmanager
def gate(tmp_path: Path) -> Iterator[tuple[Path, int]]:
    """A FIFO the rogue child's `complete-on` mode reads from, held open here for writing."""
    path = tmp_path / "gate"
    os.mkfifo(path)
    fd = os.open(path, os.O_RDWR)  # never blocks; the child's open for reading then does not either
    try:
        yield path, fd
    finally:
        os.close(fd)


def task_lines(daemon: Daemon, event: str, task_id: str) -> list[dict[str, object]]:
    return [line for line in daemon.log() if line.get("event") == event and line.get("task_id") == task_id]


def left_alone_then_completes(daemon: Daemon, group: StarvingCgroup, gate_fd: int, task_id: str) -> None:
    """The starvation under test lasts and the child is left alone; given the CPU and its gate's
    line, it completes with its own result."""
    time.sleep(STARVED_FOR_S)
    assert task_lines(daemon, "subagent.stuck", task_id) == []
    group.release()
    os.write(gate_fd, b"go\n")
    view = daemon.wait(task_id, timeout_s=30)
    assert view.status is S.COMPLETED
    assert view.result == "released"
    assert task_lines(daemon, "subagent.stuck", task_id) == []


def test_a_child_starved_of_cpu_is_given_more_time_and_completes_once_it_gets_the_cpu(tmp_path: Path) -> None:
    body = rogue_daemon(tmp_path, supervision="starved_grace_s = 60\n")
    with gate(tmp_path) as (path, fd), running_daemon(tmp_path, body) as daemon, starving_cgroup() as group:
        task_id = daemon.submit(f"complete-on {path}")
        pid = daemon.wait_ready([task_id])[task_id]
        group.starve(pid)
        starved = daemon.wait_log("subagent.starved", timeout_s=20, task_id=task_id)
        assert (starved["late"], starved["cpu"]) == ("unresponsive", "starved")
        left_alone_then_completes(daemon, group, fd, task_id)


def test_a_child_starved_past_its_grace_is_stopped_as_starved_not_stuck(tmp_path: Path) -> None:
    body = rogue_daemon(tmp_path, supervision="starved_grace_s = 1\n")
    with gate(tmp_path) as (path, _), running_daemon(tmp_path, body) as daemon, starving_cgroup() as group:
        task_id = daemon.submit(f"complete-on {path}")
        pid = daemon.wait_ready([task_id])[task_id]
        group.starve(pid)
        stuck = daemon.wait_log("subagent.stuck", timeout_s=30, task_id=task_id)
        group.release()  # a starved process takes its signals only once it runs
        assert stuck["verdict"] == "starved"
        assert stuck["cpu"] == "starved"
        assert isinstance(stuck["overdue_s"], float)
        assert stuck["overdue_s"] >= 1.0
        view = daemon.wait(task_id, timeout_s=30)
        assert view.status is S.CRASHED
        assert view.error is not None
        assert view.error.kind == "starved"
        assert "starved of CPU" in view.error.message
        assert task_lines(daemon, "subagent.starved", task_id)  # told when it was given the time


# Booting: `ready-on` spins on the CPU until its gate opens, then sends `ev/ready` and completes.
BOOTING = "ready_timeout_s = 1\nstarved_grace_s = 60\n"


def test_a_child_starved_of_cpu_while_it_boots_is_given_more_time_and_completes(tmp_path: Path) -> None:
    body = rogue_daemon(tmp_path, supervision=BOOTING)
    with gate(tmp_path) as (path, fd), running_daemon(tmp_path, body) as daemon, starving_cgroup() as group:
        task_id = daemon.submit(f"ready-on {path}")
        spawned = daemon.wait_log("subagent.spawn", task_id=task_id)
        group.starve(int(str(spawned["pid"])))
        starved = daemon.wait_log("subagent.starved", timeout_s=20, task_id=task_id)
        assert (starved["late"], starved["cpu"]) == ("not_ready", "starved")
        left_alone_then_completes(daemon, group, fd, task_id)  # three ready timeouts over


def test_a_child_that_has_the_cpu_and_is_still_not_ready_is_stopped_as_not_ready(tmp_path: Path) -> None:
    body = rogue_daemon(tmp_path, supervision=BOOTING)
    with gate(tmp_path) as (path, _), running_daemon(tmp_path, body) as daemon:
        task_id = daemon.submit(f"ready-on {path}")
        # On a loaded machine it may look starved at first; its second of CPU makes it busy.
        stuck = daemon.wait_log("subagent.stuck", timeout_s=30, task_id=task_id)
        assert (stuck["verdict"], stuck["cpu"]) == ("not_ready", "busy")
        view = daemon.wait(task_id, timeout_s=30)
        assert view.status is S.CRASHED
        assert view.error is not None
        assert view.error.kind == "stuck"
        assert view.error.message.startswith(
            "not ready: no ev/ready within supervision.ready_timeout_s (it had the CPU and did not answer)"
        )
