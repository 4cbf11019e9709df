"""Prestarted subagents: a trigger's task forked while its URI's debounce window is open.

A trigger's task cannot start before its debounce window closes, and a delivery is a journaled task
before anything of the task happens (docs/design.md §11). What can happen before is everything the task
does not do itself: when a window opens, the trigger manager asks here (`prestart`) for the child of
its task-to-be, whose ids it took from the journal's allocation. Its payload is built by the same
builder as its run's (task_payloads.py); it is forked (in its cgroup leaf, with its limits and run
marker), sent its spawn payload with `hold_s`, and left: it opens its model client and the hinted
tools and waits for `ctrl/go` — no model call, no tool call, no MCP server started
(subagent/run.py). When the window closes the delivery is journaled with those ids as always; the
task's run `take`s the parked child instead of forking one and sends `ctrl/go` only once `running`
is committed (task_run.py).

A parked child no task takes — its window ended without a start (paused, dropped at the gate,
refused by a quota, the trigger removed, the daemon draining), its task was cancelled while
queued, or it outlived its hold — is killed (its process group and cgroup leaf) and reaped here.
The child itself ends when its hold runs out, when its control channel closes (the daemon died),
and by PDEATHSIG; nothing it did before `ctrl/go` is observable.
"""

from __future__ import annotations

import contextlib
import os
import signal
from collections.abc import Callable
from dataclasses import dataclass, field

import anyio
import anyio.abc
import structlog

from agentd.errors import SpawnError
from agentd.journal.records import TaskRecord
from agentd.spawning.cgroup import CgroupLeaf, CgroupRoot
from agentd.spawning.spawner import SpawnedProcess, Spawner, SpawnRequest
from agentd.supervision.child_pipes import write_all
from agentd.supervision.ports import ParkedChild, RunOptions
from agentd.supervision.task_payloads import PayloadError
from processes.linux import reap_nowait, signal_pidfd
from protocol import control
from protocol.framing import encode
from protocol.spawn import REVEAL_SECRETS, SpawnPayload

# Parked children at once, across the daemon (each is a booted subagent: ~9 MiB and a process).
PARK_LIMIT = 16
# A parked child's hold beyond its window's `max_wait`: long enough for a journaled task to be
# scheduled under load, short enough that an untaken child does not linger.
HOLD_SLACK_S = 30.0
WRITE_TIMEOUT_S = 5.0
REAP_TIMEOUT_S = 5.0
EXPIRE_EVERY_S = 1.0

log = structlog.get_logger("agentd.supervision.parking")


@dataclass(eq=False)
class Parked:
    """One prestarted child, from its fork request until a run takes it or it is reaped."""

    task_id: str
    run_id: str
    # The payload it was sent (with `hold_s`); the run's own must match it but for the instruction.
    payload: SpawnPayload
    expires: float
    proc: SpawnedProcess | None = None
    leaf: CgroupLeaf | None = None
    # Set once the fork and the payload's write are done, whether they worked or not.
    settled: anyio.Event = field(default_factory=anyio.Event)
    failed: bool = False
    discarded: bool = False


def same_task(held: SpawnPayload, real: SpawnPayload) -> bool:
    """Whether the run's payload is the held one's but for what `ctrl/go` carries (the instruction,
    the deadline left) and the trace context (a parked child's spans start a trace of their own)."""

    def key(payload: SpawnPayload) -> SpawnPayload:
        telemetry = payload.telemetry.model_copy(update={"traceparent": None})
        limits = payload.limits.model_copy(update={"deadline_s": 1.0})
        return payload.model_copy(
            update={"instruction": "-", "hold_s": None, "telemetry": telemetry, "limits": limits}
        )

    return key(held) == key(real)


def preparable(payload: SpawnPayload) -> bool:
    """A payload a parked child can prepare without starting anything: every granted MCP server
    has a catalogue hint (connecting any other would start it before the task exists)."""
    return all(spec.name in payload.mcp_catalogues for spec in payload.mcp_servers)


class Parking:
    """The daemon's parked children. `serve` in the supervisor's task group; `close` on a drain."""

    def __init__(
        self,
        spawner: Spawner,
        cgroups: CgroupRoot | None,
        options: Callable[[], RunOptions],
        payload: Callable[[TaskRecord], SpawnPayload],
        *,
        limit: int = PARK_LIMIT,
    ) -> None:
        self._spawner = spawner
        self._cgroups = cgroups
        self._options = options
        # The task's root payload as its run will build it (raises `PayloadError`).
        self._payload = payload
        self.limit = limit
        self._parked: dict[str, Parked] = {}
        # Killed and not reaped yet: still ours, so the orphan sweep spares them.
        self._dying: set[Parked] = set()
        self._tg: anyio.abc.TaskGroup | None = None
        self._closed = False
        # Starts and kills under way; `_idle` is set whenever there are none (`close` waits on it).
        self._busy = 0
        self._idle: anyio.Event | None = None
        # Set when a child is parked: an idle daemon's expiry loop sleeps until then.
        self._parked_one: anyio.Event | None = None

    def __len__(self) -> int:
        return len(self._parked)

    def pids(self) -> set[int]:
        entries = [*self._parked.values(), *self._dying]
        return {e.proc.pid for e in entries if e.proc is not None}

    async def serve(self) -> None:
        """Run parks, kills and the expiry of untaken children until cancelled."""
        try:
            async with anyio.create_task_group() as tg:
                self._tg = tg
                while True:
                    if not self._parked:
                        self._parked_one = anyio.Event()
                        await self._parked_one.wait()
                    await anyio.sleep(EXPIRE_EVERY_S)
                    now = anyio.current_time()
                    for entry in [e for e in self._parked.values() if e.expires <= now]:
                        self.discard(entry.task_id, "its hold ran out")
        finally:
            self._tg = None

    def prestart(self, record: TaskRecord, hold_s: float) -> bool:
        """Park a held child for `record`, the task a trigger's open window will journal, for at
        most `hold_s`; False when none was parked (see `park`, or a payload that cannot be built)."""
        try:
            payload = self._payload(record)
        except PayloadError:
            return False
        return self.park(record.task_id, record.run_id, payload, hold_s)

    def park(self, task_id: str, run_id: str, payload: SpawnPayload, hold_s: float) -> bool:
        """Fork a held child for the task `task_id` will be (in the background). False when it is
        not worth it or not possible: no zygote warm, the limit reached, a payload that cannot be
        prepared without starting a server, or a drain."""
        if (
            self._tg is None
            or self._closed
            or len(self._parked) >= self.limit
            or task_id in self._parked
            or self._spawner.state != "warm"
            or not preparable(payload)
        ):
            return False
        held = payload.model_copy(update={"hold_s": hold_s})
        entry = Parked(task_id, run_id, held, expires=anyio.current_time() + hold_s)
        self._parked[task_id] = entry
        if self._parked_one is not None:
            self._parked_one.set()
        self._enter()  # left by `_start`
        self._tg.start_soon(self._start, entry)
        return True

    def _enter(self) -> None:
        self._busy += 1

    def _leave(self) -> None:
        self._busy -= 1
        if self._busy == 0 and self._idle is not None:
            self._idle.set()
            self._idle = None

    async def _start(self, entry: Parked) -> None:
        try:
            await self._start_one(entry)
        finally:
            self._leave()

    async def _start_one(self, entry: Parked) -> None:
        options = self._options()
        try:
            if self._cgroups is not None:
                # Not the run's own leaf name: a run that falls back to a fork (the parked child
                # died, or its payload no longer matches) must not share a leaf with its kill.
                entry.leaf = self._cgroups.create_leaf(
                    f"{entry.task_id}-0-prestarted", memory_max=options.memory_max, pids_max=options.pids_max
                )
            request = SpawnRequest(
                task_id=entry.task_id,
                run_id=entry.run_id,
                handle="0",
                rlimits=options.rlimits,
                cgroup=str(entry.leaf.path) if entry.leaf else None,
                argv=options.child_argv,
            )
            # No await between the spawn's return and this: the sweep sees it as ours at once.
            entry.proc = await self._spawner.spawn_child(request)
            frame = encode(control.Spawn(params=entry.payload), context=REVEAL_SECRETS)
            if not entry.discarded and not await write_all(entry.proc.stdin_fd, frame, WRITE_TIMEOUT_S):
                entry.failed = True
            else:
                log.info(
                    "subagent.spawn",
                    comp="supervisor",
                    task_id=entry.task_id,
                    run_id=entry.run_id,
                    pid=entry.proc.pid,
                    via=entry.proc.via,
                    prestart=True,
                )
        except (SpawnError, OSError) as exc:
            entry.failed = True
            log.warning(
                "subagent.spawn", comp="supervisor", task_id=entry.task_id, prestart=True, err=str(exc)
            )
        finally:
            entry.settled.set()
        if entry.failed and self._parked.get(entry.task_id) is entry:
            del self._parked[entry.task_id]
            entry.discarded = True
        if entry.discarded:  # failed, or discarded while it started: reap what was started
            await self._kill(entry)

    async def take(self, task_id: str) -> Parked | None:
        """The parked child for `task_id`, now the caller's (None: there is none, or it failed or
        died). Waits for a park still under way: it is further along than a fresh fork."""
        entry = self._parked.get(task_id)
        if entry is None:
            return None
        try:
            with anyio.move_on_after(WRITE_TIMEOUT_S * 2):
                await entry.settled.wait()
        except BaseException:
            self.discard(task_id, "its run was cancelled")
            raise
        if self._parked.get(task_id) is not entry:
            return None  # discarded meanwhile
        if not entry.settled.is_set() or entry.failed or entry.proc is None or _exited(entry.proc):
            self.discard(task_id, "it failed or died before it was taken")
            return None
        # Ownership passes with no await: the caller owns the process before anything else runs.
        del self._parked[task_id]
        return entry

    def discard(self, task_id: str, reason: str) -> None:
        """Kill and reap `task_id`'s parked child (in the background), if there is one."""
        entry = self._parked.pop(task_id, None)
        if entry is not None:
            self.kill(entry, reason)

    def kill(self, entry: ParkedChild, reason: str) -> None:
        """Kill and reap a parked child nobody will run (one discarded, or taken and not used)."""
        assert isinstance(entry, Parked)
        if entry.discarded:
            return
        entry.discarded = True
        pid = entry.proc.pid if entry.proc is not None else None
        log.info(
            "subagent.exit", comp="supervisor", task_id=entry.task_id, pid=pid, prestart=True, reason=reason
        )
        if not entry.settled.is_set():
            return  # its start is under way: it kills what it started once it is done
        self._dying.add(entry)  # now, not when the kill task runs: the sweep must not reap it first
        if self._tg is not None:
            self._enter()
            self._tg.start_soon(self._kill_counted, entry)
        else:
            _kill_now(entry)
            self._dying.discard(entry)

    async def _kill_counted(self, entry: Parked) -> None:
        try:
            await self._kill(entry)
        finally:
            self._leave()  # entered by `kill`, when it started this task

    async def _kill(self, entry: Parked) -> None:
        self._dying.add(entry)
        try:
            with anyio.CancelScope(shield=True):
                proc = entry.proc
                if proc is not None:
                    _signal(proc)
                    if entry.leaf is not None:
                        entry.leaf.kill()
                    with anyio.move_on_after(REAP_TIMEOUT_S):
                        while reap_nowait(proc.pidfd) is None:
                            await anyio.wait_readable(proc.pidfd)
                    proc.close_fds()
                if entry.leaf is not None:
                    await entry.leaf.retire()
        finally:
            self._dying.discard(entry)

    def begin_close(self) -> None:
        """No more parks; every parked child is killed (the daemon drains)."""
        self._closed = True
        for task_id in list(self._parked):
            self.discard(task_id, "agentd is shutting down")

    async def close(self) -> None:
        """`begin_close`, then wait (bounded) until every parked child is reaped."""
        self.begin_close()
        with anyio.move_on_after(REAP_TIMEOUT_S + WRITE_TIMEOUT_S):
            while self._busy:
                if self._idle is None:
                    self._idle = anyio.Event()
                await self._idle.wait()


def _signal(proc: SpawnedProcess) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(proc.pid, signal.SIGKILL)
    with contextlib.suppress(OSError):
        signal_pidfd(proc.pidfd, signal.SIGKILL)


def _kill_now(entry: Parked) -> None:
    """Outside the event loop's task group (it is gone): SIGKILL and reap, blocking briefly."""
    proc = entry.proc
    if proc is None:
        return
    _signal(proc)
    with contextlib.suppress(ChildProcessError, OSError):
        os.waitpid(proc.pid, 0)
    proc.close_fds()


def _exited(proc: SpawnedProcess) -> bool:
    import select

    readable, _, _ = select.select([proc.pidfd], [], [], 0)
    return bool(readable)
