"""A supervisor with many live children: ping RTT (in-process) and daemon memory (real daemon).

Booting a real subagent costs about 2 s of CPU, so the children here are the light stand-in
`tests/fixtures/rogue_child.py` in its `idle` mode: it speaks the control protocol, answers
every `ctrl/ping` from a thread, and ends on `ctrl/cancel`. RTT samples come from
`SupervisedChild.recent_rtts_s`, so they need an in-process `Supervisor` (the daemon's own
scheduler, journal and spawner, without the API socket).
"""

from __future__ import annotations

import gc
import json
import os
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import anyio
import psutil

from agentd import logs
from agentd.api.client import ApiClient
from agentd.config.sections import SupervisionSection
from agentd.journal.records import TaskRecord
from agentd.journal.store import open_journal
from agentd.spawning.spawner import ExecSpawner
from agentd.supervision.liveness import LivenessPolicy
from agentd.supervision.ports import RunOptions
from agentd.supervision.supervised_child import SupervisedChild
from agentd.supervision.supervisor import Supervisor, SupervisorOptions
from bench.daemon_procs import BenchDaemon, ChildrenMemory
from bench.samples import Summary, summarize
from protocol.api import SubmitParams, SubmitRequest, TaskSpec
from protocol.spawn import EndpointSpec, SpawnPayload
from tests.support.daemon import FIXTURES

ROGUE = str(FIXTURES / "rogue_child.py")
READY_TIMEOUT_S = 180.0
DRAIN_TIMEOUT_S = 30.0
SETTLE_S = 1.0  # after the last child is ready, let boot-time CPU and the journal go quiet
COLLECT_EVERY_S = 0.5  # well inside a child's 256-sample RTT ring at any ping interval used here


@dataclass(frozen=True, slots=True)
class RttResult:
    children: int
    ping_interval_s: float
    window_s: float
    rtt: Summary
    pongs_missing_at_end: int
    supervisor_cpu_pct: float  # of one core, over the window
    process_rss_mb: float  # this bench process: the supervisor plus the bench


@dataclass(frozen=True, slots=True)
class DaemonWithChildren:
    children: int
    ready_s: float
    daemon_rss_mb: float
    daemon_cpu_pct: float
    memory: ChildrenMemory


def _stand_in_payload(record: TaskRecord) -> SpawnPayload:
    # The stand-in reads only the instruction; the endpoint is never called.
    endpoint = EndpointSpec(kind="openai", base_url="http://127.0.0.1:9/v1", model="unused")
    return SpawnPayload(
        task_id=record.task_id,
        run_id=record.run_id,
        instruction=record.spec.instruction,
        intelligence=[endpoint],
    )


async def measure_rtt(workdir: Path, children: int, ping_interval_s: float, window_s: float) -> RttResult:
    """Ping RTT of `children` idle stand-ins under an in-process `Supervisor`.

    The supervisor's orphan sweep kills every child of this process it does not own: no daemon
    started by this bench may be running meanwhile.
    """
    logs.configure("error")
    options = SupervisorOptions(
        max_concurrent_tasks=children,
        run=RunOptions(
            liveness=LivenessPolicy(ping_interval_s=ping_interval_s), child_argv=(sys.executable, ROGUE)
        ),
    )
    spec = TaskSpec(instruction="idle", labels={"bench": "rtt"})
    async with open_journal(workdir / "state") as journal:
        for _ in range(children):
            await journal.tasks.submit(spec, owner_uid=os.getuid())
        # Children below us as the daemon puts them (SCHED_BATCH, `subagent_nice`): its defaults.
        defaults = SupervisionSection()
        spawner = ExecSpawner(batch=defaults.batch_scheduling, nice=defaults.subagent_nice)
        supervisor = Supervisor(journal, _stand_in_payload, spawner, options)
        async with anyio.create_task_group() as tg:
            tg.start_soon(supervisor.serve)
            supervisor.notify_submitted()
            await _poll_until(lambda: len(supervisor.owned_pids()) == children, READY_TIMEOUT_S)
            live = _supervised_children(supervisor.owned_pids())
            await _poll_until(lambda: all(child.ready for child in live), READY_TIMEOUT_S)
            await anyio.sleep(SETTLE_S)
            for child in live:
                child.recent_rtts_s.clear()
            me = psutil.Process()
            cpu_before, started = _cpu_s(me), time.monotonic()
            samples: list[float] = []
            end = anyio.current_time() + window_s
            while anyio.current_time() < end:
                await anyio.sleep(min(COLLECT_EVERY_S, max(0.0, end - anyio.current_time())))
                for child in live:
                    samples.extend(child.recent_rtts_s)
                    child.recent_rtts_s.clear()
            cpu_pct = 100 * (_cpu_s(me) - cpu_before) / (time.monotonic() - started)
            rss_mb = me.memory_info().rss / (1024 * 1024)
            missing = sum(child.outstanding_pings for child in live)
            supervisor.drain()
            with anyio.fail_after(DRAIN_TIMEOUT_S):
                await supervisor.wait_drained()
            tg.cancel_scope.cancel()
    return RttResult(
        children=children,
        ping_interval_s=ping_interval_s,
        window_s=window_s,
        rtt=summarize(samples),
        pongs_missing_at_end=missing,
        supervisor_cpu_pct=round(cpu_pct, 1),
        process_rss_mb=round(rss_mb, 1),
    )


async def _poll_until(done: Callable[[], bool], timeout_s: float) -> None:
    # Readiness is only visible as state on the children: poll it, bounded.
    with anyio.fail_after(timeout_s):
        while True:
            if done():
                return
            await anyio.sleep(0.05)


def _supervised_children(pids: set[int]) -> list[SupervisedChild]:
    """The `SupervisedChild` objects owning `pids`.

    Found through the garbage collector rather than the supervisor's private bookkeeping, which
    is being reworked (task trees): the bench depends only on `Supervisor`'s public surface.
    """
    found = [o for o in gc.get_objects() if isinstance(o, SupervisedChild) and o.pid in pids]
    if len(found) != len(pids):
        raise RuntimeError(f"found {len(found)} supervised children for {len(pids)} pids")
    return found


def _cpu_s(proc: psutil.Process) -> float:
    times = proc.cpu_times()
    return float(times.user + times.system)


def measure_bare_loop(children: int, ping_interval_s: float, window_s: float) -> Summary:
    """The control: a bare anyio loop pinging as many stand-ins over pipes, with no supervisor.

    Same children, interval and event loop as under the supervisor, minus everything the
    supervisor does (framing, pydantic, liveness, journal): what is left is the machine and the
    event loop — on a VM, waking idle vCPUs and scheduling under other tenants' load.
    """
    procs: list[subprocess.Popen[bytes]] = []
    try:
        for _ in range(children):
            procs.append(
                subprocess.Popen(
                    [sys.executable, ROGUE],
                    stdin=subprocess.PIPE,
                    stdout=subprocess.PIPE,
                    process_group=0,  # as the supervisor's spawner does: own group, our session
                )
            )
        return summarize(anyio.run(_ping_all, procs, ping_interval_s, window_s))
    finally:
        for proc in procs:
            proc.kill()
        for proc in procs:
            proc.wait()
            for pipe in (proc.stdin, proc.stdout):
                if pipe is not None:
                    pipe.close()


async def _ping_all(procs: list[subprocess.Popen[bytes]], interval_s: float, window_s: float) -> list[float]:
    rtts: list[float] = []
    with anyio.fail_after(READY_TIMEOUT_S + window_s):
        async with anyio.create_task_group() as tg:
            start = anyio.current_time() + SETTLE_S * 3  # all booted and answering by then
            for proc in procs:
                tg.start_soon(_ping_bare, proc, interval_s, start, start + window_s, rtts)
    return rtts


async def _ping_bare(
    proc: subprocess.Popen[bytes], interval_s: float, start: float, end: float, rtts: list[float]
) -> None:
    assert proc.stdin is not None
    assert proc.stdout is not None
    into, out = proc.stdin.fileno(), proc.stdout.fileno()
    os.set_blocking(out, False)
    spawn = {"jsonrpc": "2.0", "method": "ctrl/spawn", "params": {"instruction": "idle"}}
    os.write(into, json.dumps(spawn).encode() + b"\n")
    await _read_line(out)  # ev/ready
    seq = 0
    while (now := anyio.current_time()) < end:
        seq += 1
        ping = {"jsonrpc": "2.0", "id": seq, "method": "ctrl/ping", "params": {"seq": seq}}
        os.write(into, json.dumps(ping).encode() + b"\n")
        await _read_line(out)
        if now >= start:
            rtts.append(anyio.current_time() - now)
        await anyio.sleep(interval_s)


async def _read_line(fd: int) -> bytes:
    data = b""
    while not data.endswith(b"\n"):
        await anyio.wait_readable(fd)
        chunk = os.read(fd, 1 << 16)
        if not chunk:
            raise RuntimeError("the stand-in child closed its channel")
        data += chunk
    return data


def measure_daemon(daemon: BenchDaemon, children: int, cpu_window_s: float) -> DaemonWithChildren:
    """Daemon RSS (and its CPU while idle) with `children` live stand-ins it supervises."""
    started = time.monotonic()
    with ApiClient(daemon.socket, timeout_s=30) as api:
        task_ids = []
        for _ in range(children):
            spec = TaskSpec(instruction="idle", labels={"bench": "rss"})
            task_ids.append(api.call(SubmitRequest(params=SubmitParams(spec=spec))).task_id)
    daemon.daemon.wait_ready(task_ids, timeout_s=READY_TIMEOUT_S)
    ready_s = time.monotonic() - started
    time.sleep(SETTLE_S)
    proc = psutil.Process(daemon.pid)
    cpu_before, cpu_started = _cpu_s(proc), time.monotonic()
    time.sleep(cpu_window_s)
    cpu_pct = 100 * (_cpu_s(proc) - cpu_before) / (time.monotonic() - cpu_started)
    return DaemonWithChildren(
        children=children,
        ready_s=round(ready_s, 2),
        daemon_rss_mb=daemon.rss_mb(),
        daemon_cpu_pct=round(cpu_pct, 1),
        memory=daemon.children_memory(),
    )
