"""The subreaper's orphan sweep (DESIGN §6).

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


def sweep(owned: Set[int], *, on_kill: Callable[[int, str], None] | None = None) -> list[int]:
    """Kill and reap every direct child not in `owned`; return the pids handled."""
    handled: list[int] = []
    try:
        children = psutil.Process().children(recursive=False)
    except psutil.Error:
        return handled
    for proc in children:
        if proc.pid in owned:
            continue
        try:
            name = proc.name()
            if proc.status() != psutil.STATUS_ZOMBIE:
                os.kill(proc.pid, signal.SIGKILL)
        except (psutil.Error, ProcessLookupError):
            pass
        else:
            if on_kill is not None:
                on_kill(proc.pid, name)
        _reap(proc.pid)
        handled.append(proc.pid)
    return handled


def _reap(pid: int) -> None:
    # A just-killed process becomes a zombie within microseconds; the next sweep catches a
    # straggler, so this never blocks.
    with contextlib.suppress(ChildProcessError):
        os.waitpid(pid, os.WNOHANG)


def log_orphan(pid: int, name: str) -> None:
    logs.get().warning("subagent.signal", pid=pid, signal="SIGKILL", reason="orphan", process=name)
