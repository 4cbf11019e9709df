"""When the daemon freezes its long-lived objects and when it runs a full collection (pure).

A full collection walks every tracked object; with a thousand live tasks that took ≈ 0.4 s of
wall time, and Python runs one each time the long-lived objects grew by a quarter — over and over
while a burst spawns. Objects frozen (`gc.freeze`) are out of every collection's sight. So, while
tasks are live and objects were promoted to the old generation since the last step (a collection
of generation 1 or 2 ran), the daemon freezes what has survived a young collection (their
long-lived state); frozen objects still die by reference count, and a finished task's are
freed that way because its state is cycle-free (tests/daemon/test_tracked_objects.py). Cyclic
garbage among frozen objects is caught by a full collection of everything (`unfreeze` first),
run when the daemon has been idle a while (no task live) or when the frozen heap outgrew its bound.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

Step = Literal["freeze", "full", "none"]


@dataclass(frozen=True, slots=True)
class CollectorPolicy:
    # Idle (no task live for `idle_after_s`): a full collection once at least this many objects
    # were frozen since the last one. It walks what start-up froze too (≈ 60,000 objects, ≈ 70 ms
    # of CPU here), so it waits until the daemon has been idle a while, not the instant a burst ends.
    idle_slack: int = 2_000
    idle_after_s: float = 5.0
    # Busy: a full collection once the frozen objects are more than twice what the last one left
    # plus this many (≈ 2,000 live tasks' state): the bound on garbage that frozen cycles may hold.
    busy_floor: int = 500_000


@dataclass(frozen=True, slots=True)
class Heap:
    """What the step is decided on."""

    frozen: int  # objects in the permanent generation now
    frozen_after_full: int  # ... right after the last full collection
    live_tasks: int
    idle_for_s: float  # how long no task has been live (0 while one is)
    promotions_since_step: int  # collections of generation 1 or 2 since the last step


def next_step(heap: Heap, policy: CollectorPolicy) -> Step:
    """`full`: unfreeze and collect everything; `freeze`: freeze the survivors; or nothing."""
    grown = heap.frozen - heap.frozen_after_full
    if heap.live_tasks == 0:
        return "full" if grown >= policy.idle_slack and heap.idle_for_s >= policy.idle_after_s else "none"
    if heap.frozen > 2 * heap.frozen_after_full + policy.busy_floor:
        return "full"
    if heap.promotions_since_step > 0:
        return "freeze"
    return "none"
