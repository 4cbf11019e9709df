"""Starting subagent processes: the `Spawner` seam and `ExecSpawner` (docs/design.md §2, §6).

`ExecSpawner` uses `posix_spawn` — no Python runs between fork and exec, so it is safe in a
threaded daemon — with the child in its own session, signal dispositions reset, and three pipes
whose supervisor ends are non-blocking and close-on-exec. Resource limits are applied with
`prlimit` right after the spawn and before the spawn payload is sent (the child does nothing
until it reads that payload); PDEATHSIG is set by the child itself at boot, guarded by
`AGENTD_SUPERVISOR_PID`.
"""

from __future__ import annotations

import contextlib
import functools
import os
import resource
import signal
import sys
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Literal, Protocol

import psutil

from agentd.errors import SpawnError
from processes.linux import open_pidfd
from processes.pipes import StdioPipes, open_stdio_pipes
from protocol.environment import CGROUP_ENV, RUN_MARKER_ENV, SUPERVISOR_PID_ENV, TEST_FAULT_ENV

# Environment names a child must never inherit (docs/design.md §6): systemd's notify, watchdog and
# socket-activation contracts belong to the daemon alone.
SCRUBBED_PREFIXES = ("NOTIFY_SOCKET", "WATCHDOG_", "LISTEN_")
OTEL_PREFIX = "OTEL_"
# TEST_FAULT_ENV arms a chaos test's fault in the child; only the daemon's own environment sets it.
PASSED_ENV = (
    "PATH",
    "HOME",
    "LANG",
    "LC_ALL",
    "TZ",
    "TMPDIR",
    "USER",
    "LOGNAME",
    "SHELL",
    "TERM",
    TEST_FAULT_ENV,
)
# What `daemon.status` reports: "starting" until the zygote's imports are done (spawns wait),
# "warm" while it forks, "failed" when it is dead or gave up (spawns exec), "off" for `exec`.
ZygoteState = Literal["warm", "starting", "failed", "off"]
RESET_SIGNALS = (signal.SIGPIPE, signal.SIGXFSZ, signal.SIGINT, signal.SIGTERM, signal.SIGHUP, signal.SIGUSR1)


@dataclass(frozen=True, slots=True)
class RLimits:
    """Per-child resource limits; `None` leaves the inherited value."""

    address_space: int | None = 8 << 30
    cpu_seconds: int | None = 3600
    nofile: int | None = 1024
    core: int | None = 0


@dataclass(frozen=True, slots=True)
class SpawnRequest:
    task_id: str
    run_id: str
    handle: str
    rlimits: RLimits = RLimits()
    cgroup: str | None = None
    extra_env: Mapping[str, str] = field(default_factory=dict)
    # The program to run; the default is this interpreter running the subagent.
    argv: Sequence[str] | None = None

    @property
    def marker(self) -> str:
        """The env marker that identifies this child across a supervisor restart."""
        return f"{self.run_id}/{self.handle}"


@dataclass(frozen=True, slots=True)
class SpawnedProcess:
    """A started child: the supervisor owns its pid through `pidfd` and the three pipe ends."""

    pid: int
    pidfd: int
    start_time: float
    stdin_fd: int
    stdout_fd: int
    stderr_fd: int
    # How it started: forked from the zygote, or a fresh interpreter (the `subagent.spawn` log says).
    via: Literal["zygote", "exec"] = "exec"

    def close_fds(self) -> None:
        for fd in (self.stdin_fd, self.stdout_fd, self.stderr_fd, self.pidfd):
            with contextlib.suppress(OSError):
                os.close(fd)


class Spawner(Protocol):
    def spawn(self, request: SpawnRequest) -> SpawnedProcess:
        """Start a child synchronously (exec)."""
        ...

    async def spawn_child(self, request: SpawnRequest) -> SpawnedProcess:
        """Start a subagent its fastest way without blocking the loop (the zygote: pipelined)."""
        ...

    @property
    def spawning(self) -> bool:
        """A spawn is under way whose child may already exist unowned (the orphan sweep waits)."""
        ...

    async def settle(self) -> None:
        """Wait (bounded) until `spawn` can start a child its fastest way (a zygote warming up)."""
        ...

    @property
    def state(self) -> ZygoteState:
        """The zygote's state for `daemon.status`: `warm|starting|failed`, or `off` without one."""
        ...

    def helper_pids(self) -> set[int]:
        """Long-lived helper processes of the spawner (the zygote): never swept as orphans."""
        ...


def default_argv() -> list[str]:
    """`python -I -m subagent`: isolated mode ignores PYTHON* variables and the working directory."""
    return [sys.executable, "-I", "-m", "subagent"]


def child_environment(request: SpawnRequest, base: Mapping[str, str]) -> dict[str, str]:
    """The child's environment: a short allow-list, the marker, and the supervisor's identity."""
    env = {k: base[k] for k in PASSED_ENV if k in base}
    # The standard OpenTelemetry settings: a subagent exports its traces where the daemon does.
    env.update({k: v for k, v in base.items() if k.startswith(OTEL_PREFIX)})
    env.update(request.extra_env)
    env.update(
        {
            # Without it threaded Python cannot start threads under an address-space limit.
            "MALLOC_ARENA_MAX": "2",
            "PYTHONUNBUFFERED": "1",
            SUPERVISOR_PID_ENV: str(os.getpid()),
            RUN_MARKER_ENV: request.marker,
        }
    )
    if request.cgroup:
        env[CGROUP_ENV] = request.cgroup
    return {k: v for k, v in env.items() if not k.startswith(SCRUBBED_PREFIXES)}


def lower_priority(pid: int, *, batch: bool, nice: int) -> None:
    """Put a subagent below the daemon (best effort): `nice` levels under the daemon's own, and
    under SCHED_BATCH if `batch` (`run_as_batch`). (The zygote gets SCHED_BATCH only, which its
    forks inherit; it lowers each fork's nice itself: `SUBAGENT_NICE_ENV`.)

    The child shares the daemon's session (it has a process group of its own, not a session), so
    outside a cpu cgroup the kernel shares the CPU between the daemon's tree and everyone else's
    sessions first, then between the daemon and its children by weight: nice 19 weighs 1/68 of
    nice 0. Raising a child's nice needs no privilege."""
    if nice:
        with contextlib.suppress(OSError):
            ours = os.getpriority(os.PRIO_PROCESS, 0)
            os.setpriority(os.PRIO_PROCESS, pid, min(19, ours + nice))
    if batch:
        run_as_batch(pid)


def run_as_batch(pid: int) -> None:
    """Put `pid` under SCHED_BATCH (best effort): same CPU share as before, but its wake-ups never
    preempt the running process. Every write the daemon makes to a child (a spawn frame, a ping, a
    fork request to the zygote) wakes it, and a woken SCHED_OTHER child may take the CPU from the
    daemon at once; with hundreds booting the daemon answered clients in seconds.
    Inherited across fork and exec, so the zygote's subagents and their MCP servers get it too."""
    with contextlib.suppress(OSError):
        os.sched_setscheduler(pid, os.SCHED_BATCH, os.sched_param(0))


def apply_rlimits(pid: int, limits: RLimits) -> None:
    """Lower the child's limits with prlimit(2); a limit above our own hard limit is clamped."""
    for res, value in (
        (resource.RLIMIT_AS, limits.address_space),
        (resource.RLIMIT_CPU, limits.cpu_seconds),
        (resource.RLIMIT_NOFILE, limits.nofile),
        (resource.RLIMIT_CORE, limits.core),
    ):
        if value is None:
            continue
        _, hard = resource.getrlimit(res)
        capped = value if hard == resource.RLIM_INFINITY else min(value, hard)
        # CPU: a soft limit sends SIGXCPU first; the hard limit a little later is SIGKILL.
        new_hard = capped + 5 if res == resource.RLIMIT_CPU and hard == resource.RLIM_INFINITY else capped
        if res == resource.RLIMIT_AS:
            # Only the soft limit: the subagent lifts it for the MCP servers it starts, whose
            # runtimes (Node's WebAssembly, JVMs, Go) reserve far more address space than they use.
            new_hard = hard
        resource.prlimit(pid, res, (capped, new_hard))


def process_start_time(pid: int) -> float:
    """The kernel's start time of `pid` (epoch seconds): with the pid, it names one process.

    psutil's formula (`starttime` ticks / CLK_TCK + the boot time), from one read of
    /proc/PID/stat: `psutil.Process(pid).create_time()` parses it twice and re-reads the boot time
    from /proc/stat each time, per spawn on the daemon's loop. Recovery compares this value with
    psutil's, so the two must agree.
    """
    try:
        with open(f"/proc/{pid}/stat", "rb") as stat:
            data = stat.read()
        # Field 22 (starttime), counted after the command name, which may itself hold ") ".
        ticks = int(data[data.rindex(b")") + 2 :].split()[19])
    except (OSError, ValueError, IndexError):
        return float(psutil.Process(pid).create_time())
    return ticks / _CLOCK_TICKS + _boot_time()


_CLOCK_TICKS = os.sysconf("SC_CLK_TCK")


@functools.cache
def _boot_time() -> float:
    return float(psutil.boot_time())


class ExecSpawner:
    """Spawns a fresh interpreter per child."""

    def __init__(
        self,
        argv: Sequence[str] | None = None,
        base_env: Mapping[str, str] | None = None,
        *,
        batch: bool = False,
        nice: int = 0,
    ) -> None:
        self._argv = list(argv) if argv else default_argv()
        self._base_env = dict(base_env if base_env is not None else os.environ)
        # Children below the daemon (`supervision.batch_scheduling`, `subagent_nice`: `lower_priority`).
        self._batch = batch
        self._nice = nice

    def helper_pids(self) -> set[int]:
        return set()

    async def settle(self) -> None:
        return None

    @property
    def state(self) -> ZygoteState:
        return "off"

    @property
    def spawning(self) -> bool:
        return False  # `spawn` returns with the child owned: nothing is ever in between

    async def spawn_child(self, request: SpawnRequest) -> SpawnedProcess:
        return self.spawn(request)

    def spawn(self, request: SpawnRequest) -> SpawnedProcess:
        argv = list(request.argv) if request.argv else self._argv
        try:
            pipes = open_stdio_pipes()
        except OSError as exc:
            raise SpawnError(f"could not start {argv[0]}: {exc.strerror}") from exc
        try:
            pid = os.posix_spawn(
                argv[0],
                argv,
                child_environment(request, self._base_env),
                file_actions=[
                    (os.POSIX_SPAWN_DUP2, fd, target) for target, fd in enumerate(pipes.child_ends)
                ],
                setpgroup=0,  # its own process group (the kill ladder's target), in our session
                setsigdef=RESET_SIGNALS,
                setsigmask=(),
            )
        except OSError as exc:
            pipes.close()
            raise SpawnError(f"could not start {argv[0]}: {exc.strerror}") from exc
        pipes.close_child_ends()
        lower_priority(pid, batch=self._batch, nice=self._nice)
        return adopt(pid, request.rlimits, pipes)


def adopt(
    pid: int, rlimits: RLimits, pipes: StdioPipes, via: Literal["zygote", "exec"] = "exec"
) -> SpawnedProcess:
    """Take ownership of a just-started child: its pidfd, its limits, its identity for recovery,
    and our ends of its `pipes` (made non-blocking).

    On failure the child is killed and reaped and the pipes are closed: nothing leaks.
    """
    try:
        pidfd = open_pidfd(pid)
        apply_rlimits(pid, rlimits)
        start_time = process_start_time(pid)
    except (OSError, psutil.Error) as exc:
        with contextlib.suppress(OSError):
            os.kill(pid, signal.SIGKILL)
        with contextlib.suppress(ChildProcessError):
            os.waitpid(pid, 0)
        pipes.close()
        raise SpawnError(f"could not take ownership of child {pid}: {exc}") from exc
    for fd in (pipes.stdin, pipes.stdout, pipes.stderr):
        os.set_blocking(fd, False)
    return SpawnedProcess(
        pid=pid,
        pidfd=pidfd,
        start_time=start_time,
        stdin_fd=pipes.stdin,
        stdout_fd=pipes.stdout,
        stderr_fd=pipes.stderr,
        via=via,
    )
