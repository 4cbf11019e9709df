"""Busy spinners pinned one to each CPU: how a test takes every core from a process on demand."""

from __future__ import annotations

import os
import select
import subprocess
import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager


def start_spinners(started: Callable[[int], None] = lambda _pid: None) -> list[subprocess.Popen[bytes]]:
    """A spinner pinned to each CPU this process may use (two on one CPU would leave the other
    free); `started(pid)` is called once each spins: one still starting (reading its modules) sleeps
    on the disk at times, and the CPU it was given would be free in those gaps."""
    spinners: list[subprocess.Popen[bytes]] = []
    for cpu in sorted(os.sched_getaffinity(0)):
        spinner = subprocess.Popen(
            [sys.executable, "-c", "print('spinning', flush=True)\nwhile True: pass"], stdout=subprocess.PIPE
        )
        spinners.append(spinner)
        os.sched_setaffinity(spinner.pid, {cpu})
    try:
        for spinner in spinners:
            assert spinner.stdout is not None
            readable, _, _ = select.select([spinner.stdout], [], [], 30)
            assert readable, "a spinner did not start within 30 s"
            assert spinner.stdout.readline() == b"spinning\n"
            started(spinner.pid)
    except BaseException:
        stop_spinners(spinners)  # none left spinning when starting fails
        raise
    return spinners


def stop_spinners(spinners: list[subprocess.Popen[bytes]]) -> None:
    for spinner in spinners:
        spinner.kill()
    for spinner in spinners:
        spinner.wait(timeout=10)
        assert spinner.stdout is not None
        spinner.stdout.close()
    spinners.clear()


@contextmanager
def busy_cpus() -> Iterator[None]:
    """Every CPU taken by a spinner at the tests' own priority until the block ends: a process at
    nice 19 that wakes waits on the run queue for its turn."""
    spinners = start_spinners()
    try:
        yield
    finally:
        stop_spinners(spinners)
