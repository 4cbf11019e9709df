"""What the scheduler says of a real process (`processes.sched_facts`): stopped, asleep, starved, gone."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager

import pytest

from agentd.supervision.starvation import StarvationPolicy, judge
from processes.sched_facts import read_sched_facts
from tests.support.starving_cgroup import starving_cgroup

pytestmark = pytest.mark.processes

# A main thread asleep on stdin and a second thread asleep too: the subagent's shape.
SLEEPER = (
    "import sys, threading, time\n"
    "threading.Thread(target=time.sleep, args=(60,), daemon=True).start()\n"
    "print('up', flush=True)\n"
    "sys.stdin.read()\n"
)


@contextmanager
def sleeper() -> Iterator[subprocess.Popen[bytes]]:
    """A process asleep on its stdin (seen so: on a loaded machine it may still be queued after
    it printed `up`)."""
    proc = subprocess.Popen([sys.executable, "-c", SLEEPER], stdin=subprocess.PIPE, stdout=subprocess.PIPE)
    try:
        assert proc.stdout is not None
        assert proc.stdout.readline() == b"up\n"
        deadline = time.monotonic() + 10
        while (facts := read_sched_facts(proc.pid)) is None or facts.runnable:
            assert time.monotonic() < deadline, f"never seen asleep: {facts}"
            time.sleep(0.01)
        yield proc
    finally:
        proc.kill()
        proc.wait(timeout=10)


def test_an_asleep_process_is_neither_runnable_nor_halted_and_its_threads_are_summed() -> None:
    with sleeper() as proc:
        facts = read_sched_facts(proc.pid)
        assert facts is not None
        assert (facts.threads, facts.runnable, facts.halted) == (2, False, False)
        assert facts.run_ns > 0  # the interpreter's start


def test_a_sigstopped_process_is_halted_not_runnable() -> None:
    with sleeper() as proc:
        os.kill(proc.pid, signal.SIGSTOP)
        deadline = time.monotonic() + 10
        while not ((facts := read_sched_facts(proc.pid)) and facts.halted):
            assert time.monotonic() < deadline, f"never seen stopped: {facts}"
            time.sleep(0.01)
        assert not facts.runnable


def test_a_process_gone_reads_as_none() -> None:
    proc = subprocess.Popen([sys.executable, "-c", "pass"])
    proc.wait(timeout=30)
    assert read_sched_facts(proc.pid) is None


def test_a_busy_process_kept_off_the_cpu_is_judged_starved_not_busy() -> None:
    spinner = subprocess.Popen([sys.executable, "-c", "while True: pass"])
    try:
        with starving_cgroup() as group:
            group.starve(spinner.pid)
            first = read_sched_facts(spinner.pid)
            time.sleep(0.5)  # half a second off the CPU: the window judged
            last = read_sched_facts(spinner.pid)
            assert first is not None and last is not None
            assert first.runnable and last.runnable
            assert last.run_ns - first.run_ns < 5_000_000
            assert judge(first, first, last, 0.5, StarvationPolicy()) == "starved"
    finally:
        spinner.kill()
        spinner.wait(timeout=10)
