"""Whether this server runs inside an agentd task: then starting root tasks through it would step
outside the task tree's budget, so `run_task` and `submit_task` are refused.

The supervisor marks every subagent's environment (`protocol.environment.RUN_MARKER_ENV`); an MCP
server the subagent starts gets a fresh environment, so the mark is looked for in this process's
environment and in each ancestor's (`/proc/PID/environ`, readable for processes of our own user).
"""

from __future__ import annotations

import os
from pathlib import Path

from protocol.environment import RUN_MARKER_ENV

PROC = Path("/proc")
MAX_ANCESTORS = 64
_MARK = RUN_MARKER_ENV.encode() + b"="

REFUSAL = (
    "this agentd MCP server runs inside an agentd task, where run_task and submit_task would start "
    "tasks outside the task tree's budget; use the subagent_spawn tool to start a nested subagent "
    "instead (it shares the tree's budget)"
)


def inside_a_task() -> bool:
    """True when this process or one of its ancestors is an agentd subagent."""
    if RUN_MARKER_ENV in os.environ:
        return True
    pid = os.getppid()
    for _ in range(MAX_ANCESTORS):
        if pid <= 1:
            return False
        if _marked(pid):
            return True
        parent = _parent_of(pid)
        if parent is None:
            return False
        pid = parent
    return False


def _marked(pid: int) -> bool:
    try:
        block = (PROC / str(pid) / "environ").read_bytes()
    except OSError:
        return False  # another user's process (the daemon's, under a system service) or gone
    return any(entry.startswith(_MARK) for entry in block.split(b"\0"))


def _parent_of(pid: int) -> int | None:
    try:
        status = (PROC / str(pid) / "status").read_text()
    except OSError:
        return None
    for line in status.splitlines():
        if line.startswith("PPid:"):
            return int(line.split()[1])
    return None
