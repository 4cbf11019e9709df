"""`LatencyProbe`: a normal client measuring the daemon's API latency while something hostile runs.

A background thread calls `daemon.status` on one connection and, every few rounds, submits a small
task on another, and records each round trip; a call that fails or takes longer than its bound is kept as
that bound (so a wedged daemon reads as slow, never as missing samples).
"""

from __future__ import annotations

import math
import threading
import time
from collections.abc import Callable
from pathlib import Path
from types import TracebackType

from agentd.api.client import ApiClient
from agentd.errors import ApiClientError
from protocol.api import StatusRequest, SubmitParams, SubmitRequest, TaskSpec


def percentile(samples: list[float], q: float) -> float:
    """The `q` quantile (0..1) of `samples`, nearest-rank."""
    ordered = sorted(samples)
    return ordered[max(0, math.ceil(q * len(ordered)) - 1)]


class LatencyProbe:
    """Measures `daemon.status` and `task.submit` round trips (seconds) until closed."""

    def __init__(
        self,
        socket: Path,
        *,
        instruction: str = "probe",
        pause_s: float = 0.01,
        submit_every: int = 5,
        bound_s: float = 5.0,
        min_pings: int = 50,
    ) -> None:
        self._socket = socket
        self._instruction = instruction
        self._pause_s = pause_s
        self._submit_every = submit_every
        self._min_pings = min_pings
        self._enough = threading.Event()
        self._bound_s = bound_s
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="latency-probe", daemon=True)
        self.pings: list[float] = []
        self.submits: list[float] = []
        self.task_ids: list[str] = []
        self.failures: list[str] = []

    def __enter__(self) -> LatencyProbe:
        self._thread.start()
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        # At least `min_pings` samples, so a percentile means something (bounded: a stalled call
        # takes at most `bound_s`).
        self._enough.wait(timeout=self._min_pings * (self._bound_s + self._pause_s) + 5)
        self._stop.set()
        self._thread.join(timeout=2 * self._bound_s + 5)
        assert not self._thread.is_alive(), "the latency probe did not stop"

    def _run(self) -> None:
        submit = SubmitRequest(params=SubmitParams(spec=TaskSpec(instruction=self._instruction)))
        with (
            ApiClient(self._socket, timeout_s=self._bound_s) as pinger,
            ApiClient(self._socket, timeout_s=self._bound_s) as submitter,
        ):
            rounds = 0
            while not self._stop.is_set():
                self.pings.append(self._timed(lambda: pinger.call(StatusRequest())))
                if rounds % self._submit_every == 0:
                    self.submits.append(
                        self._timed(lambda: self.task_ids.append(submitter.call(submit).task_id))
                    )
                rounds += 1
                if len(self.pings) >= self._min_pings:
                    self._enough.set()
                self._stop.wait(self._pause_s)
        self._enough.set()

    def _timed(self, call: Callable[[], object]) -> float:
        started = time.monotonic()
        try:
            call()
        except ApiClientError as exc:
            self.failures.append(f"{exc.code}: {exc.message}")
            return self._bound_s
        return time.monotonic() - started

    def summary(self) -> str:
        """`n`, p50, p99 and max of both series, in ms: the figures a test prints."""

        def line(name: str, samples: list[float]) -> str:
            if not samples:
                return f"{name}: none"
            p50, p99 = percentile(samples, 0.5) * 1000, percentile(samples, 0.99) * 1000
            return f"{name}: n={len(samples)} p50={p50:.1f}ms p99={p99:.1f}ms max={max(samples) * 1000:.1f}ms"

        return f"{line('ping', self.pings)}; {line('submit', self.submits)}"
