"""Where a daemon's event loop spends its time: a sampling profiler that needs nothing installed.

    python bench/loop_sampler.py OUT.json python -m agentd serve --config ...

runs `agentd` in this process with a thread that, every `INTERVAL_S`, takes the main thread's
stack (`sys._current_frames`) and counts each function as on-stack (inclusive) and the innermost
one (self). A sample whose innermost frame is the selector's poll is the loop being idle. The
counts are written to OUT.json every few seconds and at exit. Sampling, not tracing: it does not
slow every call the way cProfile does, so it shows where the time goes under load.
"""

from __future__ import annotations

import atexit
import gc
import json
import runpy
import signal
import sys
import threading
import time
from collections import Counter
from pathlib import Path
from types import FrameType

INTERVAL_S = 0.002
LONG_PAUSE_S = 0.005
WRITE_EVERY_S = 5.0


def _where(frame: FrameType) -> str:
    code = frame.f_code
    return f"{Path(code.co_filename).name}:{code.co_name}"


class Sampler:
    def __init__(self, out: Path) -> None:
        self.out = out
        self.main = threading.main_thread().ident
        self.inclusive: Counter[str] = Counter()
        self.own: Counter[str] = Counter()
        self.samples = 0
        self.idle = 0
        self._lock = threading.Lock()
        # The garbage collector's pauses, which no Python frame shows: per generation, count,
        # total and longest (seconds).
        self.gc_pauses: dict[int, list[float]] = {0: [0, 0.0, 0.0], 1: [0, 0.0, 0.0], 2: [0, 0.0, 0.0]}
        # Every pause of at least `LONG_PAUSE_S`: (monotonic start, generation, wall s, CPU s of the
        # collecting thread), so a bench can tell which of its windows each fell in.
        self.long_pauses: list[tuple[float, int, float, float]] = []
        self._gc_started = 0.0
        self._gc_cpu = 0.0

    def on_gc(self, phase: str, info: dict[str, int]) -> None:
        if phase == "start":
            self._gc_started = time.perf_counter()
            self._gc_cpu = time.thread_time()
            return
        took = time.perf_counter() - self._gc_started
        entry = self.gc_pauses[info["generation"]]
        entry[0] += 1
        entry[1] += took
        entry[2] = max(entry[2], took)
        if took >= LONG_PAUSE_S:
            cpu = time.thread_time() - self._gc_cpu
            started = time.monotonic() - took
            self.long_pauses.append((round(started, 4), info["generation"], round(took, 4), round(cpu, 4)))

    def run(self) -> None:
        # Started before the daemon blocks the signals it takes with `sigwaitinfo`: blocked here too,
        # or the kernel could pick this thread for a SIGTERM, whose default action kills the daemon.
        signal.pthread_sigmask(
            signal.SIG_BLOCK, {signal.SIGTERM, signal.SIGINT, signal.SIGHUP, signal.SIGUSR2}
        )
        last_write = time.monotonic()
        while True:
            time.sleep(INTERVAL_S)
            frame = sys._current_frames().get(self.main or 0)
            if frame is None:
                continue
            seen: set[str] = set()
            leaf = _where(frame)
            with self._lock:
                self.samples += 1
                if leaf == "selectors.py:select":  # waiting in epoll: the loop has nothing to do
                    self.idle += 1
                self.own[leaf] += 1
                walk: FrameType | None = frame
                while walk is not None:
                    name = _where(walk)
                    if name not in seen:
                        seen.add(name)
                        self.inclusive[name] += 1
                    walk = walk.f_back
            if time.monotonic() - last_write > WRITE_EVERY_S:
                self.write()
                last_write = time.monotonic()

    def write(self) -> None:
        with self._lock:
            data = {
                "samples": self.samples,
                "idle": self.idle,
                "gc": {
                    str(g): {"count": c, "total_s": round(t, 3), "max_s": round(m, 3)}
                    for g, (c, t, m) in self.gc_pauses.items()
                },
                "long_gc_pauses": self.long_pauses,
                "self": self.own.most_common(60),
                "inclusive": self.inclusive.most_common(120),
            }
        self.out.write_text(json.dumps(data, indent=1))


def main() -> None:
    out = Path(sys.argv[1])
    # argv[2:] is `python -m agentd serve ...`: run that module here, under the sampler.
    module_at = sys.argv.index("-m")
    module = sys.argv[module_at + 1]
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
    sampler = Sampler(out)
    threading.Thread(target=sampler.run, name="loop-sampler", daemon=True).start()
    atexit.register(sampler.write)
    gc.callbacks.append(sampler.on_gc)
    sys.argv = [module, *sys.argv[module_at + 2 :]]
    runpy.run_module(module, run_name="__main__", alter_sys=True)


if __name__ == "__main__":
    main()
