"""The zygote spawner: subagents forked from a warm process, owned by the daemon, with exec fallback."""

from __future__ import annotations

import os
import signal
import time
from pathlib import Path

import psutil
import pytest

from agentd.supervision.supervisor import is_run_of
from protocol.environment import RUN_MARKER_ENV, ZYGOTE_RUN_ID
from protocol.result import TerminalStatus as S
from tests.support.daemon import (
    running_daemon,
    scripted,
    start_daemon,
    write_config,
)
from tests.support.zygote import (
    PATIENT_PINGS,
    SLOW,
    forked_from_zygote,
    wait_zygote_state,
    zygote_pid,
    zygote_state,
)

pytestmark = pytest.mark.processes


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
        assert os.getpgid(pid) == pid  # its own process group, in the daemon's session
        assert os.getsid(pid) == os.getsid(daemon.pid)
        assert child.name() == "agentd-subagent"
        assert child.environ()[RUN_MARKER_ENV] == f"{ZYGOTE_RUN_ID}/0"  # its own is set after the fork
        # What a restarted daemon's recovery checks recognises it as this run's subagent.
        view = daemon.call("task.get", {"task_id": task_id})
        assert isinstance(view, dict)
        assert is_run_of(child.environ(), str(view["run_id"]))
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


BURST = 10


@pytest.mark.alone  # the zygote must warm up within zygote_wait_s (30 s)
def test_a_burst_the_moment_the_socket_answers_waits_for_the_zygote_instead_of_exec(tmp_path: Path) -> None:
    lines = f"max_concurrent_tasks = {BURST}\n"
    with running_daemon(tmp_path, body(tmp_path), daemon_lines=lines) as daemon:
        # The socket answers before the zygote has finished its imports.
        assert zygote_state(daemon) in ("starting", "warm")
        task_ids = [daemon.submit(f"slow {i}") for i in range(BURST)]
        pids = daemon.wait_ready(task_ids, timeout_s=60)
        assert sorted(pids) == sorted(task_ids)  # none lost
        exec_d = [task_id for task_id, pid in pids.items() if not forked_from_zygote(pid)]
        assert not exec_d, f"{len(exec_d)} of {BURST} were exec'd while the zygote warmed up"
        assert zygote_state(daemon) == "warm"
        assert not [line for line in daemon.log() if line.get("fallback") == "exec"]
        spawns = [line for line in daemon.log() if line.get("event") == "subagent.spawn"]
        assert [line["via"] for line in spawns] == ["zygote"] * BURST
        for task_id in task_ids:
            daemon.call("task.cancel", {"task_id": task_id})
        assert {daemon.wait(task_id).status for task_id in task_ids} == {S.CANCELLED}
        for pid in pids.values():
            assert not psutil.pid_exists(pid) or psutil.Process(pid).status() == psutil.STATUS_ZOMBIE


def test_a_zygote_that_dies_during_a_burst_loses_no_acknowledged_task(tmp_path: Path) -> None:
    lines = f"max_concurrent_tasks = {BURST}\n"
    with running_daemon(tmp_path, body(tmp_path) + PATIENT_PINGS, daemon_lines=lines) as daemon:
        zygote = zygote_pid(daemon)
        wait_zygote_state(daemon, "warm")
        task_ids = [daemon.submit(f"quick {i}") for i in range(BURST // 2)]
        os.kill(zygote, signal.SIGKILL)  # while the first half are being forked or running
        task_ids += [daemon.submit(f"quick {i}") for i in range(BURST // 2, BURST)]
        views = [daemon.wait(task_id, timeout_s=120) for task_id in task_ids]
        assert [v.status for v in views] == [S.COMPLETED] * BURST, [v.error for v in views]
        assert [line for line in daemon.log() if line.get("process") == "zygote" and line.get("fallback")]
        # A new zygote takes over after its restart delay, and forks again.
        wait_zygote_state(daemon, "warm")
        task_id = daemon.submit("slow after the restart")
        pid = daemon.wait_ready([task_id])[task_id]
        assert forked_from_zygote(pid)
        daemon.call("task.cancel", {"task_id": task_id})
        assert daemon.wait(task_id).status is S.CANCELLED
        assert not psutil.pid_exists(zygote) or psutil.Process(zygote).status() == psutil.STATUS_ZOMBIE


def test_daemon_status_says_off_without_a_zygote(tmp_path: Path) -> None:
    config = body(tmp_path) + '[supervision]\nspawner = "exec"\n'
    with running_daemon(tmp_path, config) as daemon:
        assert zygote_state(daemon) == "off"
        pid = daemon.wait_ready([task_id := daemon.submit("slow")])[task_id]
        assert not forked_from_zygote(pid)
        daemon.call("task.cancel", {"task_id": task_id})
        assert daemon.wait(task_id).status is S.CANCELLED


def test_a_zero_wait_execs_while_the_zygote_starts(tmp_path: Path) -> None:
    config = body(tmp_path) + "[supervision]\nzygote_wait_s = 0\n"
    with running_daemon(tmp_path, config) as daemon:
        if zygote_state(daemon) != "starting":
            pytest.skip("the zygote was warm before the first submit")
        pid = daemon.wait_ready([task_id := daemon.submit("slow")])[task_id]
        assert not forked_from_zygote(pid)
        daemon.call("task.cancel", {"task_id": task_id})
        assert daemon.wait(task_id).status is S.CANCELLED


@pytest.mark.alone  # the zygote must warm up within zygote_wait_s (30 s)
def test_a_nested_subagent_is_forked_from_the_zygote_too(tmp_path: Path) -> None:
    spawn = {"name": "subagent_spawn", "arguments": {"instruction": "nested: wait here", "wait": False}}
    config = scripted(
        "m", [{"tool_calls": [spawn]}, *SLOW], tmp_path, roles=[{"match": "^nested", "turns": SLOW}]
    )
    with running_daemon(tmp_path, config + '[defaults]\nmodel = "m"\n') as daemon:
        task_id = daemon.submit("delegate at once")  # the moment the socket answers, too
        deadline = time.monotonic() + 60
        while True:
            tree = daemon.call("task.tree", {"task_id": task_id})
            assert isinstance(tree, list)
            child = next((n for n in tree if n["handle"] == "0.1" and n["pid"]), None)
            if child is not None and child["state"] == "running":
                break
            assert time.monotonic() < deadline, f"the nested child never ran: {tree}"
            time.sleep(0.05)
        root = next(n for n in tree if n["handle"] == "0")
        assert forked_from_zygote(int(root["pid"]))
        assert forked_from_zygote(int(child["pid"]))
        assert psutil.Process(int(child["pid"])).ppid() == daemon.pid
        daemon.call("task.cancel", {"task_id": task_id})
        assert daemon.wait(task_id).status is S.CANCELLED
