"""The subreaper's orphan sweep (docs/design.md §6).

As `PR_SET_CHILD_SUBREAPER`, the daemon inherits every process orphaned below it — a stdio MCP
server whose subagent was killed, a grandchild that escaped with `setsid`. The sweep kills and
reaps, by pid, each child of the daemon that the daemon does not own. Owned children are reaped
only through their pidfds, never here, and never with `waitpid(-1)`.
"""

from __future__ import annotations

import contextlib
import os
import signal
from collections.abc import Callable, Set

import psutil

from agentd import logs


def direct_children() -> set[int]:
    """The pids of this process's children, in O(children).

    `/proc/self/task/*/children` lists each thread's children (an orphan is reparented to the
    main thread; a child started from a worker thread is that thread's). psutil's `children()`
    reads every process's stat file instead — with a thousand subagents, a thousand times per
    sweep. Where the kernel lacks the file (CONFIG_PROC_CHILDREN), psutil it is.
    """
    if not os.path.exists(f"/proc/self/task/{os.getpid()}/children"):
        return {proc.pid for proc in psutil.Process().children(recursive=False)}
    pids: set[int] = set()
    for tid in os.listdir("/proc/self/task"):
        try:
            with open(f"/proc/self/task/{tid}/children") as listing:
                pids.update(int(pid) for pid in listing.read().split())
        except OSError:
            continue  # a thread that ended meanwhile, and its children with it
    return pids


def sweep(owned: Set[int], *, on_kill: Callable[[int, str], None] | None = None) -> list[int]:
    """Kill and reap every direct child not in `owned`; return the pids handled."""
    handled: list[int] = []
    try:
        children = direct_children() - owned
    except psutil.Error:
        return handled
    for pid in sorted(children):
        try:
            proc = psutil.Process(pid)
            if proc.ppid() != os.getpid():
                continue  # already reaped and the pid reused: not ours
            name = proc.name()
            if proc.status() != psutil.STATUS_ZOMBIE:
                os.kill(proc.pid, signal.SIGKILL)
        except (psutil.Error, ProcessLookupError):
            pass
        else:
            if on_kill is not None:
                on_kill(pid, name)
        _reap(pid)
        handled.append(pid)
    return handled


def _reap(pid: int) -> None:
    # A just-killed process becomes a zombie within microseconds; the next sweep catches a
    # straggler, so this never blocks.
    with contextlib.suppress(ChildProcessError):
        os.waitpid(pid, os.WNOHANG)


def log_orphan(pid: int, name: str) -> None:
    logs.get().warning("subagent.signal", pid=pid, signal="SIGKILL", reason="orphan", process=name)
