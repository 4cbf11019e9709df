"""Latency samples reduced to the figures the benches report: count, p50, p90, p99, max (ms).

Percentiles are nearest-rank over the sorted samples, so a p99 over 40 samples is the 40th
(the worst): small runs report the pessimistic figure rather than an interpolated one. `write_json`
is how every bench writes its results.
"""

from __future__ import annotations

import json
import math
import statistics
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True, slots=True)
class Summary:
    count: int
    p50_ms: float
    p90_ms: float
    p99_ms: float
    max_ms: float
    mean_ms: float


def percentile(ordered: Sequence[float], fraction: float) -> float:
    """Nearest-rank percentile of already sorted samples."""
    rank = max(1, math.ceil(fraction * len(ordered)))
    return ordered[rank - 1]


def summarize(samples_s: Sequence[float]) -> Summary:
    """Summarise samples given in seconds; the figures are in milliseconds."""
    if not samples_s:
        nan = float("nan")
        return Summary(0, nan, nan, nan, nan, nan)
    ordered = sorted(s * 1000 for s in samples_s)
    return Summary(
        count=len(ordered),
        p50_ms=round(statistics.median(ordered), 3),
        p90_ms=round(percentile(ordered, 0.90), 3),
        p99_ms=round(percentile(ordered, 0.99), 3),
        max_ms=round(ordered[-1], 3),
        mean_ms=round(statistics.fmean(ordered), 3),
    )


def write_json(path: Path, document: object) -> None:
    """Write a bench's results as indented JSON (creating the directory) and say where."""
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(document, indent=2) + "\n")
    print(f"wrote {path}")
