"""Durable submits per second through a real daemon's socket (docs/design.md §10 target: >= 500/s).

Each client is a thread with its own connection (the CLI's `ApiClient`); `task.submit` is
acknowledged only after its COMMIT. The daemon runs one task at a time and that task is an idle
stand-in child, so what is measured is intake — parse, validate, commit, ack — not execution.
"""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass

from agentd.api.client import ApiClient
from agentd.errors import ApiClientError
from bench.daemon_procs import BenchDaemon
from bench.samples import Summary, summarize
from protocol.api import StatusRequest, SubmitParams, SubmitRequest, TaskSpec

SUBMIT = SubmitRequest(params=SubmitParams(spec=TaskSpec(instruction="idle", labels={"bench": "intake"})))
CALL_TIMEOUT_S = 30.0


@dataclass(frozen=True, slots=True)
class IntakeRun:
    clients: int
    submits: int
    duration_s: float
    submits_per_s: float
    latency: Summary


def measure(daemon: BenchDaemon, clients: int, duration_s: float) -> IntakeRun:
    """`clients` connections submitting back to back for `duration_s`."""
    latencies: list[list[float]] = [[] for _ in range(clients)]
    errors: list[Exception] = []
    # All connections are open before the clock starts; the main thread then sets the deadline.
    barrier = threading.Barrier(clients + 1)
    deadline = [0.0]

    def client(index: int) -> None:
        mine = latencies[index]
        try:
            with ApiClient(daemon.socket, timeout_s=CALL_TIMEOUT_S) as api:
                api.call(StatusRequest())
                barrier.wait(timeout=CALL_TIMEOUT_S)
                while time.perf_counter() < deadline[0]:
                    started = time.perf_counter()
                    api.call(SUBMIT)
                    mine.append(time.perf_counter() - started)
        except (ApiClientError, OSError, threading.BrokenBarrierError) as exc:  # the main thread raises it
            errors.append(exc)
            barrier.abort()

    threads = [threading.Thread(target=client, args=(i,), name=f"submit-{i}") for i in range(clients)]
    for thread in threads:
        thread.start()
    deadline[0] = time.perf_counter() + 3600.0
    barrier.wait(timeout=CALL_TIMEOUT_S)
    started = time.perf_counter()
    deadline[0] = started + duration_s
    for thread in threads:
        thread.join(timeout=duration_s + CALL_TIMEOUT_S)
    elapsed = time.perf_counter() - started
    if errors:
        raise RuntimeError(f"a submitting client failed: {errors[0]!r}") from errors[0]
    samples = [s for per_client in latencies for s in per_client]
    return IntakeRun(
        clients=clients,
        submits=len(samples),
        duration_s=round(elapsed, 3),
        submits_per_s=round(len(samples) / elapsed, 1),
        latency=summarize(samples),
    )


def queued_and_running(daemon: BenchDaemon) -> int:
    """Tasks the daemon holds (queued + running): after the runs, every acked submit."""
    with ApiClient(daemon.socket, timeout_s=CALL_TIMEOUT_S) as api:
        status = api.call(StatusRequest())
    return status.queued + status.running
