"""The daemon's garbage-collector policy in effect (`daemon.gc_freeze`; the decisions in
`collector_policy.py`): once a second, freeze the survivors of a young collection when objects
were promoted while tasks are live, or collect everything when the daemon has been idle a while or
the frozen heap outgrew its bound."""

from __future__ import annotations

import gc
from collections.abc import Callable

import anyio

from agentd.service.collector_policy import CollectorPolicy, Heap, Step, next_step

TICK_S = 1.0
# Counting the frozen objects walks them all (≈ 3 ms per 300,000 here): while tasks are live the
# count for the bound is refreshed this often, not every tick.
COUNT_EVERY_S = 30.0


def _promotions() -> int:
    """Collections of generation 1 or 2 so far: each moved survivors into the old generation."""
    stats = gc.get_stats()
    return int(stats[1]["collections"]) + int(stats[2]["collections"])


class Collector:
    """Applies `next_step` to this process's collector; `live_tasks` counts the tasks live now."""

    def __init__(self, live_tasks: Callable[[], int], policy: CollectorPolicy | None = None) -> None:
        self.live_tasks = live_tasks
        self.policy = policy or CollectorPolicy()
        self.frozen_after_full = gc.get_freeze_count()
        self._promotions_at_step = _promotions()
        self._idle_since: float | None = None
        self._frozen = self.frozen_after_full
        self._counted_at: float | None = None
        self.full_collections = 0
        self.freezes = 0

    def step(self, now: float) -> Step:
        live = self.live_tasks()
        if live:
            self._idle_since = None
        elif self._idle_since is None:
            self._idle_since = now
        if not live or self._counted_at is None or now - self._counted_at >= COUNT_EVERY_S:
            self._frozen, self._counted_at = gc.get_freeze_count(), now
        heap = Heap(
            frozen=self._frozen,
            frozen_after_full=self.frozen_after_full,
            live_tasks=live,
            idle_for_s=now - self._idle_since if self._idle_since is not None else 0.0,
            promotions_since_step=_promotions() - self._promotions_at_step,
        )
        step = next_step(heap, self.policy)
        if step == "freeze":
            # Young garbage goes first, so what is frozen has survived a collection: long-lived.
            gc.collect(1)
            gc.freeze()
            self.freezes += 1
        elif step == "full":
            gc.unfreeze()
            gc.collect()
            gc.freeze()  # what survived is the daemon's own state again, as at start
            self.frozen_after_full = self._frozen = gc.get_freeze_count()
            self.full_collections += 1
        if step != "none":
            self._promotions_at_step = _promotions()  # this step's own collection included
        return step

    async def run(self) -> None:
        while True:
            await anyio.sleep(TICK_S)
            self.step(anyio.current_time())
