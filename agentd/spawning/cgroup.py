"""cgroup v2 leaves for children, when a writable v2 subtree exists (docs/design.md §6).

With systemd `Delegate=yes` (or as root on a pure v2 host) the daemon moves itself into a
`supervisor` leaf of its own cgroup and creates one leaf per child under `tasks/` with
`memory.max` and `pids.max`; `cgroup.kill` ends everything in a leaf — the only thing that stops
a fork bomb or a `setsid` escapee. Anywhere else (v1/hybrid hosts, no permission) `discover`
returns None and agentd falls back silently to rlimits, process groups, PDEATHSIG and the sweep.
"""

from __future__ import annotations

import contextlib
import os
import re
from dataclasses import dataclass
from pathlib import Path

import anyio
import structlog

CGROUP2_MOUNT = Path("/sys/fs/cgroup")
PROC_SELF_CGROUP = Path("/proc/self/cgroup")
# cgroup.kill is asynchronous: the leaf empties once the kernel has delivered the SIGKILLs.
LEAF_EMPTY_TIMEOUT_S = 1.0
LEAF_POLL_S = 0.01
# The supervisor leaf's cpu.weight against `tasks/` at the default 100: where the cpu controller
# can be delegated, the daemon (and the zygote in its leaf) gets ten elevenths of the CPU it asks
# for however many subagents are runnable, so a busy fleet cannot starve the loop that answers
# clients, journals steps and runs the kill ladder (docs/decisions.md).
SUPERVISOR_CPU_WEIGHT = 1000
_LEAF_SAFE = re.compile(r"[^A-Za-z0-9_.-]")

log = structlog.get_logger("agentd.spawning.cgroup")


def _write(path: Path, value: str) -> None:
    with open(path, "w") as f:
        f.write(value)


@dataclass(frozen=True, slots=True)
class CgroupLeaf:
    path: Path

    def kill(self) -> None:
        """Kill every process in the leaf (kernel ≥ 5.14); best effort."""
        with contextlib.suppress(OSError):
            _write(self.path / "cgroup.kill", "1")

    def oom_killed(self) -> bool:
        """Did the kernel's OOM killer act inside this leaf?"""
        try:
            text = (self.path / "memory.events").read_text()
        except OSError:
            return False
        match = re.search(r"^oom_kill (\d+)$", text, re.MULTILINE)
        return bool(match and int(match.group(1)) > 0)

    def populated(self) -> bool:
        """Is any process left in the leaf (`populated 1` in `cgroup.events`)?"""
        try:
            text = (self.path / "cgroup.events").read_text()
        except OSError:
            return False
        match = re.search(r"^populated (\d+)$", text, re.MULTILINE)
        return bool(match and int(match.group(1)))

    def remove(self) -> None:
        # rmdir, never a recursive delete: the kernel owns the control files and removes them
        # with the directory; a leaf that still holds a process refuses (EBUSY), quietly.
        with contextlib.suppress(OSError):
            os.rmdir(self.path)

    async def retire(self, timeout_s: float = LEAF_EMPTY_TIMEOUT_S) -> None:
        """Teardown after the child was reaped: kill what is left in the leaf — a grandchild that
        left the process group with `setsid` — wait (bounded) until the kernel reports it empty,
        and remove it."""
        if self.populated():
            self.kill()
            with anyio.move_on_after(timeout_s):
                # A kernel file, not an event we could await (inotify would be the alternative).
                while self.populated():  # noqa: ASYNC110
                    await anyio.sleep(LEAF_POLL_S)
        self.remove()


@dataclass(frozen=True, slots=True)
class CgroupRoot:
    """The delegated subtree: children live in `tasks/`, the daemon in `supervisor/`."""

    path: Path

    def create_leaf(self, name: str, *, memory_max: int | None, pids_max: int | None) -> CgroupLeaf | None:
        leaf = CgroupLeaf(self.path / "tasks" / _LEAF_SAFE.sub("_", name))
        try:
            leaf.path.mkdir(exist_ok=True)
            if memory_max is not None:
                _write(leaf.path / "memory.max", str(memory_max))
                with contextlib.suppress(OSError):
                    _write(leaf.path / "memory.swap.max", "0")
            if pids_max is not None:
                _write(leaf.path / "pids.max", str(pids_max))
        except OSError as exc:
            log.warning("proc.start", comp="supervisor", err=f"cgroup leaf unavailable: {exc.strerror}")
            leaf.remove()
            return None
        return leaf


def own_cgroup(proc_self_cgroup: str) -> str | None:
    """The v2 path of this process from /proc/self/cgroup text (the `0::/path` line)."""
    for line in proc_self_cgroup.splitlines():
        if line.startswith("0::"):
            return line[3:] or "/"
    return None


def is_pure_v2(mount: Path = CGROUP2_MOUNT) -> bool:
    return (mount / "cgroup.controllers").exists()


def discover(mount: Path = CGROUP2_MOUNT, *, self_cgroup: Path = PROC_SELF_CGROUP) -> CgroupRoot | None:
    """Set up the delegated subtree if possible; None means: fall back silently.

    `mount` and `self_cgroup` are the real cgroupfs and /proc file in production; tests point
    them at a fake tree in a temporary directory (these machines are cgroup v1).
    """
    if not is_pure_v2(mount):
        return None
    try:
        rel = own_cgroup(self_cgroup.read_text())
        if rel is None:
            return None
        root = mount / rel.lstrip("/")
        controllers = (root / "cgroup.controllers").read_text().split()
        if not {"memory", "pids"} <= set(controllers):
            return None
        supervisor = root / "supervisor"
        tasks = root / "tasks"
        supervisor.mkdir(exist_ok=True)
        tasks.mkdir(exist_ok=True)
        # No internal processes: the daemon leaves the subtree root before enabling controllers.
        _write(supervisor / "cgroup.procs", str(os.getpid()))
        _write(root / "cgroup.subtree_control", "+memory +pids")
        _write(tasks / "cgroup.subtree_control", "+memory +pids")
    except OSError:
        return None
    if "cpu" in controllers:
        _weigh_supervisor(root)
    return CgroupRoot(root)


def _weigh_supervisor(root: Path) -> None:
    """Give the supervisor leaf `SUPERVISOR_CPU_WEIGHT` (best effort: the kernel refuses `+cpu`
    while a realtime process is in the subtree, and nice levels then share the CPU alone)."""
    try:
        _write(root / "cgroup.subtree_control", "+cpu")
        _write(root / "supervisor" / "cpu.weight", str(SUPERVISOR_CPU_WEIGHT))
    except OSError as exc:
        log.info("proc.start", comp="supervisor", err=f"cgroup cpu weight unavailable: {exc.strerror}")
