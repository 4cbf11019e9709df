"""Real `agentd serve` processes for the daemon bench: start, measure memory, stop, leave nothing.

A bench daemon is started like a test daemon (`tests/support/daemon.py`: its own session, a
private socket and state dir). Stopping drains it with SIGTERM (bounded), then SIGKILLs its
process group and every descendant it was ever seen with, so a bench run leaves no process
behind; `strays` proves it afterwards by the supervisor pid every child carries in its env.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

import psutil

from tests.support.daemon import Daemon, start_daemon, write_config

MIB = 1024 * 1024
DRAIN_TIMEOUT_S = 40.0


@dataclass(frozen=True, slots=True)
class ChildrenMemory:
    """Memory of a daemon's live descendants, in MiB."""

    count: int
    rss_total_mb: float
    rss_mean_mb: float
    uss_total_mb: float


@dataclass
class BenchDaemon:
    daemon: Daemon
    # Every descendant observed while it ran, so one that outlives the daemon is still found.
    seen: dict[int, psutil.Process] = field(default_factory=dict)
    left_after_drain: int = 0
    drain_exit_code: int | None = None

    @property
    def pid(self) -> int:
        return self.daemon.pid

    @property
    def socket(self) -> Path:
        return self.daemon.socket

    def rss_mb(self) -> float:
        rss: int = psutil.Process(self.pid).memory_info().rss
        return round(rss / MIB, 1)

    def observe(self) -> list[psutil.Process]:
        """The daemon's live descendants (remembered for the final cleanup)."""
        try:
            found: list[psutil.Process] = psutil.Process(self.pid).children(recursive=True)
        except psutil.NoSuchProcess:
            return []
        for proc in found:
            self.seen.setdefault(proc.pid, proc)
        return found

    def children_memory(self) -> ChildrenMemory:
        rss = uss = 0
        count = 0
        for proc in self.observe():
            try:
                info = proc.memory_full_info()
            except psutil.Error:
                continue
            rss += info.rss
            uss += info.uss
            count += 1
        return ChildrenMemory(
            count=count,
            rss_total_mb=round(rss / MIB, 1),
            rss_mean_mb=round(rss / MIB / count, 1) if count else 0.0,
            uss_total_mb=round(uss / MIB, 1),
        )

    def stop(self) -> None:
        """Drain with SIGTERM (bounded), then kill its process group and every seen descendant."""
        self.observe()
        proc = self.daemon.proc
        if proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
        try:
            self.drain_exit_code = proc.wait(timeout=DRAIN_TIMEOUT_S)
        except subprocess.TimeoutExpired:
            pass
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(proc.pid, signal.SIGKILL)  # its session: the daemon and anything it left there
        proc.wait()
        alive = [p for p in self.seen.values() if _alive(p)]
        self.left_after_drain = len(alive)
        kill_all(alive)


@contextlib.contextmanager
def open_daemon(
    workdir: Path, body: str, *, daemon_lines: str = "", fast: bool = True, env: dict[str, str] | None = None
) -> Iterator[BenchDaemon]:
    """A running daemon with this TOML body; stopped and cleaned up on exit, whatever happens."""
    workdir.mkdir(parents=True, exist_ok=True)
    config = write_config(workdir, body, daemon=daemon_lines, fast=fast)
    bench = BenchDaemon(start_daemon(workdir, config, env))
    try:
        yield bench
    finally:
        bench.stop()


def _alive(proc: psutil.Process) -> bool:
    # is_running also compares the start time, so a recycled pid is never taken for ours.
    try:
        return bool(proc.is_running() and proc.status() != psutil.STATUS_ZOMBIE)
    except psutil.Error:
        return False


def kill_all(procs: Iterable[psutil.Process]) -> None:
    live = [p for p in procs if _alive(p)]
    for proc in live:
        with contextlib.suppress(psutil.Error):
            proc.kill()
    psutil.wait_procs(live, timeout=5)


def strays(supervisor_pids: Iterable[int]) -> list[psutil.Process]:
    """Live processes started by one of these supervisors (`AGENTD_SUPERVISOR_PID`), or by us."""
    wanted = {str(pid) for pid in supervisor_pids}
    me = psutil.Process()
    found = {p.pid: p for p in me.children(recursive=True) if _alive(p)}
    uid = os.getuid()
    for proc in psutil.process_iter(["uids"]):
        try:
            if proc.info["uids"] is None or proc.info["uids"].real != uid or proc.pid in found:
                continue
            if proc.environ().get("AGENTD_SUPERVISOR_PID") in wanted and _alive(proc):
                found[proc.pid] = proc
        except psutil.Error:
            continue
    return list(found.values())
