"""Leak checks for tests that spawn processes: no stray descendant, no zombie, no fd growth.

The test session makes itself a child subreaper (see conftest), so a grandchild orphaned by a
killed subagent is reparented to the test process and shows up here instead of escaping to init.
"""

from __future__ import annotations

import os
import time

import psutil


def open_fd_count() -> int:
    return len(os.listdir("/proc/self/fd"))


def live_descendants() -> list[psutil.Process]:
    """Descendants of this process that are still alive (zombies are reaped as a side effect)."""
    alive: list[psutil.Process] = []
    for proc in psutil.Process().children(recursive=True):
        try:
            if proc.status() == psutil.STATUS_ZOMBIE:
                # An orphan reparented to us: reap it so it does not linger.
                try:
                    os.waitpid(proc.pid, os.WNOHANG)
                except ChildProcessError:
                    pass
                continue
            alive.append(proc)
        except psutil.NoSuchProcess:
            continue
    return alive


def wait_no_descendants(timeout_s: float = 10.0) -> list[psutil.Process]:
    """Wait (bounded) for every descendant to be gone; return those still alive at the end."""
    deadline = time.monotonic() + timeout_s
    while True:
        alive = live_descendants()
        if not alive or time.monotonic() >= deadline:
            return alive
        time.sleep(0.02)


def kill_all(procs: list[psutil.Process]) -> None:
    for proc in procs:
        try:
            proc.kill()
        except psutil.NoSuchProcess:
            continue
    psutil.wait_procs(procs, timeout=5)
    for proc in procs:
        try:
            os.waitpid(proc.pid, os.WNOHANG)
        except ChildProcessError:
            pass
