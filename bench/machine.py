"""The machine around a bench phase: load average, and how much CPU this bench and others took.

On a shared machine a figure means little without the load it was taken under. `CpuMeter` splits
the machine's busy time over a phase into this bench's process tree (itself, the daemons and
their children, live or reaped) and everyone else, plus hypervisor steal.
"""

from __future__ import annotations

import os
import time
from dataclasses import dataclass

import psutil


@dataclass(frozen=True, slots=True)
class MachineShare:
    """One phase, as percentages of all CPUs together (100 = every CPU busy throughout)."""

    seconds: float
    load_avg_at_start: tuple[float, float, float]
    busy_pct: float
    ours_pct: float
    others_pct: float
    steal_pct: float


def _busy_and_steal_s() -> tuple[float, float]:
    t = psutil.cpu_times()
    busy = t.user + t.nice + t.system + t.irq + t.softirq + t.steal  # guest time is inside user
    return float(busy), float(t.steal)


def _ours_s() -> float:
    """CPU of this process and its descendants; reaped ones are counted in their parents."""
    me = psutil.Process()
    procs = [me]
    try:
        procs += me.children(recursive=True)
    except psutil.Error:
        pass
    total = 0.0
    for proc in procs:
        try:
            t = proc.cpu_times()
        except psutil.Error:
            continue
        total += t.user + t.system + t.children_user + t.children_system
    return total


class CpuMeter:
    def __init__(self) -> None:
        self._load = tuple(round(x, 2) for x in os.getloadavg())
        self._at = time.monotonic()
        self._busy, self._steal = _busy_and_steal_s()
        self._ours = _ours_s()

    def stop(self) -> MachineShare:
        elapsed = time.monotonic() - self._at
        busy, steal = _busy_and_steal_s()
        capacity = elapsed * (os.cpu_count() or 1) / 100
        busy_pct = (busy - self._busy) / capacity
        ours_pct = (_ours_s() - self._ours) / capacity
        load = self._load
        return MachineShare(
            seconds=round(elapsed, 1),
            load_avg_at_start=(load[0], load[1], load[2]),
            busy_pct=round(busy_pct, 1),
            ours_pct=round(ours_pct, 1),
            others_pct=round(max(0.0, busy_pct - ours_pct), 1),
            steal_pct=round((steal - self._steal) / capacity, 1),
        )
