"""How much a process's RSS grows while work runs in parallel threads: sampled every 10 ms."""

from __future__ import annotations

import threading
from collections.abc import Callable

import psutil

MiB = 1024 * 1024


def rss_growth_during(pid: int, work: Callable[[], int], *, threads: int = 16) -> tuple[int, list[int]]:
    """Run `work` in `threads` threads at once; the process's peak RSS over its RSS before, in
    bytes, and what each call of `work` returned (in the order they ended)."""
    proc = psutil.Process(pid)
    before = proc.memory_info().rss
    peak = [before]
    stop = threading.Event()

    def sample() -> None:
        while not stop.is_set():
            peak[0] = max(peak[0], proc.memory_info().rss)
            stop.wait(0.01)

    results: list[int] = []
    sampler = threading.Thread(target=sample)
    sampler.start()
    workers = [threading.Thread(target=lambda: results.append(work())) for _ in range(threads)]
    try:
        for worker in workers:
            worker.start()
        for worker in workers:
            worker.join(timeout=120)
    finally:
        stop.set()
        sampler.join()
    return peak[0] - before, results
