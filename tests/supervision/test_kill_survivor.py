"""Restart recovery's kill (`kill_survivor`): the previous daemon's subagent of a run, exec'd or
forked by the zygote, is killed; any other process at that pid is left alone."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import replace

import psutil
import pytest

from agentd.journal.records import TaskRecord
from agentd.supervision.supervisor import kill_survivor
from protocol.environment import RUN_MARKER_ENV, SUPERVISOR_PID_ENV, ZYGOTE_RUN_ID
from tests.support.run_ports import queued_record

pytestmark = pytest.mark.processes

# A forked subagent sets the marker in os.environ after the fork, as the zygote's child does: it
# never reaches /proc/PID/environ, which keeps the block the process was started with.
SLEEPER = f"import os, sys, time; os.environ[{RUN_MARKER_ENV!r}] = sys.argv[1]; print('up', flush=True); time.sleep(60)"


@contextmanager
def process(env: dict[str, str], late_marker: str = "") -> Iterator[subprocess.Popen[bytes]]:
    base = {k: v for k, v in os.environ.items() if k not in (RUN_MARKER_ENV, SUPERVISOR_PID_ENV)}
    proc = subprocess.Popen(
        [sys.executable, "-c", SLEEPER, late_marker], env=base | env, stdout=subprocess.PIPE
    )
    try:
        assert proc.stdout is not None
        assert proc.stdout.readline() == b"up\n"
        yield proc
    finally:
        proc.kill()
        proc.wait(timeout=10)


def running(record: TaskRecord, proc: subprocess.Popen[bytes]) -> TaskRecord:
    started = psutil.Process(proc.pid).create_time()
    return replace(record, state="running", pid=proc.pid, pid_start_time=started)


def killed(proc: subprocess.Popen[bytes]) -> bool:
    try:
        proc.wait(timeout=5)
    except subprocess.TimeoutExpired:
        return False
    return proc.returncode == -9


def test_an_execd_subagent_of_the_run_is_killed() -> None:
    record = queued_record("x")
    marker = f"{record.run_id}/1"
    with process({SUPERVISOR_PID_ENV: "1", RUN_MARKER_ENV: marker}) as proc:
        assert kill_survivor(running(record, proc))
        assert killed(proc)


def test_a_subagent_forked_by_the_zygote_is_killed_though_proc_shows_the_zygote_s_marker() -> None:
    record = queued_record("x")
    zygote = {SUPERVISOR_PID_ENV: "1", RUN_MARKER_ENV: f"{ZYGOTE_RUN_ID}/0"}
    with process(zygote, late_marker=f"{record.run_id}/1") as proc:
        assert psutil.Process(proc.pid).environ()[RUN_MARKER_ENV] == f"{ZYGOTE_RUN_ID}/0"
        assert kill_survivor(running(record, proc))
        assert killed(proc)


@pytest.mark.parametrize(
    "env",
    [
        pytest.param({}, id="a process that is no subagent"),
        pytest.param({SUPERVISOR_PID_ENV: "1"}, id="no marker"),
        pytest.param({SUPERVISOR_PID_ENV: "1", RUN_MARKER_ENV: "run-other/1"}, id="another run"),
    ],
)
def test_any_other_process_at_the_pid_is_left_alone(env: dict[str, str]) -> None:
    record = queued_record("x")
    with process(env) as proc:
        assert not kill_survivor(running(record, proc))
        assert proc.poll() is None


def test_a_recycled_pid_with_a_later_start_time_is_left_alone() -> None:
    record = queued_record("x")
    with process({SUPERVISOR_PID_ENV: "1", RUN_MARKER_ENV: f"{record.run_id}/1"}) as proc:
        earlier = replace(running(record, proc), pid_start_time=psutil.Process(proc.pid).create_time() - 5)
        assert not kill_survivor(earlier)
        assert proc.poll() is None
