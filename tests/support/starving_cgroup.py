"""`starving_cgroup`: keep a process runnable but off the CPU, on demand, whatever the machine's load.

A cgroup v1 `cpu` group with a quota of 1 ms a second, holding one busy spinner pinned to each CPU: a
process moved in at nice 19 finds a spinner on every CPU it could run on, each weighing 68 times
more, and the spinners use the group's whole quota. It stays runnable (state R) and waits on the
run queue until `release`. The spinners cost the machine 0.1 % of one CPU; the process gets about a 70th of that. Skips the test where no
writable v1 `cpu` hierarchy is mounted.
"""

from __future__ import annotations

import contextlib
import os
import subprocess
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from tests.support.spinners import start_spinners, stop_spinners

CPU_HIERARCHY = Path("/sys/fs/cgroup/cpu")
PERIOD_US = 1_000_000
QUOTA_US = 1_000


class StarvingCgroup:
    def __init__(self, path: Path) -> None:
        self.path = path
        self.spinners: list[subprocess.Popen[bytes]] = []
        # Each starved pid and the cpu group it came from.
        self._moved: dict[int, Path] = {}

    def _start_spinners(self) -> None:
        def move_in(pid: int) -> None:
            (self.path / "cgroup.procs").write_text(str(pid))

        self.spinners = start_spinners(move_in)

    def starve(self, pid: int) -> None:
        """Move `pid` (every thread of it) in, at nice 19."""
        self._moved[pid] = _cpu_group_of(pid)
        for tid in os.listdir(f"/proc/{pid}/task"):
            with contextlib.suppress(ProcessLookupError):
                os.setpriority(os.PRIO_PROCESS, int(tid), 19)
        (self.path / "cgroup.procs").write_text(str(pid))

    def release(self) -> None:
        """Give the CPU back: the spinners end, the quota goes, every starved process returns to
        the group it came from. Safe to call twice."""
        # The quota goes first: a killed spinner must run to exit, and in a group throttled by
        # the other spinners it could wait for the CPU longer than any bound here.
        (self.path / "cpu.cfs_quota_us").write_text("-1")
        stop_spinners(self.spinners)
        for pid, home in self._moved.items():
            with contextlib.suppress(ProcessLookupError, OSError):
                (home / "cgroup.procs").write_text(str(pid))
        self._moved.clear()


def _cpu_group_of(pid: int) -> Path:
    for line in Path(f"/proc/{pid}/cgroup").read_text().splitlines():
        _, controllers, group = line.split(":", 2)
        if "cpu" in controllers.split(","):
            return CPU_HIERARCHY / group.lstrip("/")
    return CPU_HIERARCHY


@contextmanager
def starving_cgroup() -> Iterator[StarvingCgroup]:
    path = CPU_HIERARCHY / f"agentd-test-starve-{os.getpid()}"
    try:
        path.mkdir()
        (path / "cpu.cfs_period_us").write_text(str(PERIOD_US))
        (path / "cpu.cfs_quota_us").write_text(str(QUOTA_US))
    except OSError as exc:
        with contextlib.suppress(OSError):
            path.rmdir()
        pytest.skip(f"no writable cgroup v1 cpu hierarchy to starve a process in: {exc}")
    group = StarvingCgroup(path)
    try:
        group._start_spinners()
        yield group
    finally:
        group.release()
        path.rmdir()
