"""One timer for every supervised process's liveness checks, instead of a sleeping task per process.

A `SupervisedProcess` (a subagent or a resource watcher) checks its liveness (pings, the
detectors, its deadline) every tick. With a task of its own for that, a thousand children were a
thousand timers waking every second and a thousand more tasks — coroutines, futures, cancel
scopes — for the garbage collector to walk on every full collection, and a cancelled task's
traceback to collect as each child ended.
The clock is one task that checks each child it was given when it is due. Invariant: a registered
child is checked while the clock serves; once it stops (its task group is cancelled), every
child still registered is told to check itself again (`SupervisedProcess.watch_alone`), so no
child is ever left unwatched.
"""

from __future__ import annotations

import heapq
import itertools
from typing import Protocol

import anyio

# The longest pause between two checks of a child; one whose pings are more frequent shortens it.
MAX_TICK_S = 1.0
# Children due within this much of each other are checked in one wake-up.
COALESCE_S = 0.001
# The clock sleeps at most this long with nothing due (and looks at an exited child that is still
# registered this often).
MAX_SLEEP_S = 0.1


class Watched(Protocol):
    @property
    def next_check_at(self) -> float: ...
    def check_liveness(self, now: float) -> None: ...
    def watch_alone(self) -> None: ...


class WatchClock:
    """Checks each registered child's liveness when it is due while `serve` runs.

    Each child keeps its own phase (`next_check_at`, from when it started): the clock sleeps until
    the next child is due, so pings go out one by one as a timer per child would send them. (Checking
    every child due within a tenth of a tick at once sent them in batches, and each pong then
    waited for the batch's others: the ping round trip with 100 children went from 0.6× a bare
    loop's p99 to 2×.) Due times are kept in a heap: a wake-up costs O(log n) per child due.
    """

    def __init__(self) -> None:
        # Each registered child and the time its entry in `_due` is for; insertion-ordered.
        self._children: dict[Watched, float] = {}
        # (due time, tie-breaker, child); an entry whose time is not the child's in `_children` is
        # stale (the child was discarded, or re-added) and is skipped.
        self._due: list[tuple[float, int, Watched]] = []
        self._order = itertools.count()
        # While the clock sleeps: until when, and what wakes it early (a child added that is due
        # sooner keeps its own phase instead of joining the children due at the wake-up).
        self._sleep_until = float("inf")
        self._wake: anyio.Event | None = None
        self.serving = False

    def __len__(self) -> int:
        return len(self._children)

    def add(self, child: Watched) -> bool:
        """Check `child` from now on; False (not added) when the clock is not serving."""
        if not self.serving:
            return False
        self._schedule(child, child.next_check_at)
        return True

    def discard(self, child: Watched) -> None:
        self._children.pop(child, None)

    def _schedule(self, child: Watched, at: float) -> None:
        self._children[child] = at
        heapq.heappush(self._due, (at, next(self._order), child))
        if at < self._sleep_until and self._wake is not None:
            self._wake.set()

    def _check_due(self, now: float) -> None:
        while self._due and self._due[0][0] <= now + COALESCE_S:
            at, _, child = heapq.heappop(self._due)
            if self._children.get(child) != at:
                continue
            child.check_liveness(now)
            # An earlier check may have ended this child. One whose check did not move its time
            # past this wake-up's window (it has exited and awaits its discard) is looked at again
            # later: rescheduled inside the window, it would be popped again here, forever.
            if child in self._children:
                due = child.next_check_at
                self._schedule(child, due if due > now + COALESCE_S else now + MAX_SLEEP_S)

    async def serve(self) -> None:
        self.serving = True
        try:
            while True:
                now = anyio.current_time()
                self._check_due(now)
                next_at = min(self._due[0][0] if self._due else now + MAX_SLEEP_S, now + MAX_SLEEP_S)
                self._sleep_until, self._wake = next_at, anyio.Event()
                with anyio.move_on_after(max(next_at - now, 0.0)):
                    await self._wake.wait()
                self._sleep_until, self._wake = float("inf"), None
        finally:
            self.serving = False
            left = list(self._children)
            self._children.clear()
            self._due.clear()
            for child in left:
                child.watch_alone()
