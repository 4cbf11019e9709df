"""The zygote spawner: subagents forked from a warm process, owned by the daemon, with exec fallback."""

from __future__ import annotations

import os
import signal
import time
from pathlib import Path

import psutil
import pytest

from protocol.environment import RUN_MARKER_ENV
from protocol.result import TerminalStatus as S
from tests.support.daemon import Daemon, running_daemon, scripted, start_daemon, write_config

pytestmark = pytest.mark.processes

SLOW = [{"text": "zzz", "delay_s": 60}]


def zygote_pid(daemon: Daemon, timeout_s: float = 30.0) -> int:
    deadline = time.monotonic() + timeout_s
    while True:
        for line in daemon.log():
            if line.get("event") == "proc.ready" and line.get("process") == "zygote":
                return int(str(line["pid"]))
        assert time.monotonic() < deadline, "the zygote never became ready"
        time.sleep(0.05)


def body(tmp_path: Path) -> str:
    return scripted("m", SLOW, tmp_path, roles=[{"match": "^quick", "turns": [{"text": "done"}]}]) + (
        '[defaults]\nmodel = "m"\n'
    )


def test_subagents_are_forked_from_the_zygote_and_owned_by_the_daemon(tmp_path: Path) -> None:
    with running_daemon(tmp_path, body(tmp_path)) as daemon:
        zygote = zygote_pid(daemon)
        assert psutil.Process(zygote).name() == "agentd-zygote"
        task_id = daemon.submit("slow")
        pid = daemon.wait_ready([task_id])[task_id]
        child = psutil.Process(pid)
        assert child.ppid() == daemon.pid  # reparented: the daemon reaps it through its pidfd
        assert os.getpgid(pid) == pid  # its own session and process group
        assert child.name() == "agentd-subagent"
        assert child.environ()[RUN_MARKER_ENV].endswith("/0")
        daemon.call("task.cancel", {"task_id": task_id})
        assert daemon.wait(task_id).status is S.CANCELLED
        quick = daemon.wait(daemon.submit("quick one"))
        assert quick.status is S.COMPLETED
        # The sweep never takes the zygote for an orphan.
        assert psutil.pid_exists(zygote)
        assert psutil.Process(zygote).status() != psutil.STATUS_ZOMBIE


def test_a_dead_zygote_falls_back_to_exec_and_tasks_still_run(tmp_path: Path) -> None:
    with running_daemon(tmp_path, body(tmp_path)) as daemon:
        zygote = zygote_pid(daemon)
        os.kill(zygote, signal.SIGKILL)
        view = daemon.wait(daemon.submit("quick after the zygote died"))
        assert view.status is S.COMPLETED
        fallback = [line for line in daemon.log() if line.get("process") == "zygote" and line.get("fallback")]
        assert fallback
        assert not psutil.pid_exists(zygote) or psutil.Process(zygote).status() != psutil.STATUS_ZOMBIE


def test_kill_9_of_the_daemon_takes_the_zygote_and_its_subagents_along(tmp_path: Path) -> None:
    config = write_config(tmp_path, body(tmp_path))
    daemon = start_daemon(tmp_path, config)
    zygote = zygote_pid(daemon)
    task_id = daemon.submit("slow")
    pid = daemon.wait_ready([task_id])[task_id]
    daemon.proc.send_signal(signal.SIGKILL)
    daemon.proc.wait(timeout=10)
    deadline = time.monotonic() + 10
    for survivor in (zygote, pid):
        while psutil.pid_exists(survivor) and psutil.Process(survivor).status() != psutil.STATUS_ZOMBIE:
            assert time.monotonic() < deadline, f"{survivor} outlived its daemon"
            time.sleep(0.02)
