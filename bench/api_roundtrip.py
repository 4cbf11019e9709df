"""API round trips: the sync CLI client against the real socket server and an in-memory backend.

Measures the latency of `daemon.status` and `task.submit` over one reused connection (p50/p99),
the cost of a fresh connection per call (what one `agentd status` pays), and throughput with
several clients at once. Prints a table and writes JSON.

    python bench/api_roundtrip.py [--calls 2000] [--clients 8] [--out bench/results/api.json]
"""

from __future__ import annotations

import argparse
import functools
import json
import statistics
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import anyio
import anyio.from_thread
import structlog

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from agentd.api.client import ApiClient  # noqa: E402
from agentd.api.limits import ApiLimits  # noqa: E402
from agentd.api.listener import open_listener  # noqa: E402
from agentd.api.server import serve_api  # noqa: E402
from protocol.api import StatusRequest, SubmitParams, SubmitRequest, TaskSpec  # noqa: E402
from tests.api.in_memory_backend import InMemoryBackend  # noqa: E402

STATUS = StatusRequest()
SUBMIT = SubmitRequest(params=SubmitParams(spec=TaskSpec(instruction="benchmark task")))


def _timed(calls: int, call: Callable[[], object]) -> list[float]:
    samples = []
    for _ in range(calls):
        start = time.perf_counter()
        call()
        samples.append(time.perf_counter() - start)
    return samples


def _summary(samples: list[float]) -> dict[str, float]:
    ordered = sorted(samples)
    return {
        "p50_ms": round(statistics.median(ordered) * 1000, 3),
        "p99_ms": round(ordered[int(len(ordered) * 0.99) - 1] * 1000, 3),
        "per_s": round(len(ordered) / sum(ordered)),
    }


def run(path: Path, calls: int, clients: int) -> dict[str, Any]:
    results: dict[str, Any] = {}
    with ApiClient(path) as client:
        _timed(100, lambda: client.call(STATUS))  # warm-up
        results["status_reused"] = _summary(_timed(calls, lambda: client.call(STATUS)))
        results["submit_reused"] = _summary(_timed(calls, lambda: client.call(SUBMIT)))

    def fresh() -> object:
        with ApiClient(path) as one_shot:
            return one_shot.call(STATUS)

    results["status_fresh_connection"] = _summary(_timed(min(calls, 500), fresh))

    per_client = calls // clients
    barrier = threading.Barrier(clients + 1)

    def worker() -> None:
        with ApiClient(path) as own:
            own.call(STATUS)
            barrier.wait()
            for _ in range(per_client):
                own.call(SUBMIT)

    threads = [threading.Thread(target=worker) for _ in range(clients)]
    for thread in threads:
        thread.start()
    barrier.wait()
    start = time.perf_counter()
    for thread in threads:
        thread.join()
    elapsed = time.perf_counter() - start
    results["submit_concurrent"] = {"clients": clients, "per_s": round(per_client * clients / elapsed)}
    return results


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--calls", type=int, default=2000)
    parser.add_argument("--clients", type=int, default=8)
    parser.add_argument("--out", type=Path, default=REPO / "bench" / "results" / "api.json")
    args = parser.parse_args()
    structlog.configure(wrapper_class=structlog.make_filtering_bound_logger(40))  # warnings and up only
    limits = ApiLimits(max_connections_per_uid=args.clients + 4)
    with (
        tempfile.TemporaryDirectory() as tmp,
        anyio.from_thread.start_blocking_portal("asyncio") as portal,
        open_listener(Path(tmp) / "run" / "agentd.sock") as sock,
    ):
        backend = portal.call(InMemoryBackend)
        server = portal.start_task_soon(functools.partial(serve_api, sock, backend, limits=limits))
        try:
            results = run(Path(tmp) / "run" / "agentd.sock", args.calls, args.clients)
        finally:
            server.cancel()
    for name, row in results.items():
        print(f"{name:26} " + "  ".join(f"{k}={v}" for k, v in row.items()))
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(results, indent=2) + "\n")


if __name__ == "__main__":
    main()
