"""One timer for every supervised child's liveness checks, instead of a sleeping task per child.

A `SupervisedChild` checks its liveness (pings, the detectors, its deadline) every tick. With a
task of its own for that, a thousand children were a thousand timers waking every second and a
thousand more tasks — coroutines, futures, cancel scopes — for the garbage collector to walk on
every full collection, and a cancelled task's traceback to collect as each child ended (issue 16).
The clock is one task that checks each child it was given once per tick. Invariant: a registered
child is checked while the clock serves; once it stops (its task group is cancelled), every
child still registered is told to check itself again (`SupervisedChild.watch_alone`), so no
child is ever left unwatched.
"""

from __future__ import annotations

from typing import Protocol

import anyio

# The longest pause between two checks of a child; one whose pings are more frequent shortens it.
MAX_TICK_S = 1.0
# The clock wakes this many times per tick and checks the children then due: each child keeps its
# own phase (from when it started), so a thousand children's pings and pongs are spread over the
# tick instead of arriving in one burst that the API waits behind.
SLICES = 10


class Watched(Protocol):
    @property
    def tick_s(self) -> float: ...
    @property
    def next_check_at(self) -> float: ...
    def check_liveness(self, now: float) -> None: ...
    def watch_alone(self) -> None: ...


class WatchClock:
    """Checks each registered child's liveness every tick while `serve` runs."""

    def __init__(self) -> None:
        # Insertion-ordered, so children are checked in the order they started.
        self._children: dict[Watched, None] = {}
        self.serving = False

    def __len__(self) -> int:
        return len(self._children)

    def add(self, child: Watched) -> bool:
        """Check `child` from now on; False (not added) when the clock is not serving."""
        if not self.serving:
            return False
        self._children[child] = None
        return True

    def discard(self, child: Watched) -> None:
        self._children.pop(child, None)

    async def serve(self) -> None:
        self.serving = True
        try:
            while True:
                await anyio.sleep(min((c.tick_s for c in self._children), default=MAX_TICK_S) / SLICES)
                now = anyio.current_time()
                for child in list(self._children):
                    # An earlier child's check may have ended this one.
                    if child.next_check_at <= now and child in self._children:
                        child.check_liveness(now)
        finally:
            self.serving = False
            left = list(self._children)
            self._children.clear()
            for child in left:
                child.watch_alone()
