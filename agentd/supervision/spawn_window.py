"""The spawn window: at most `size` subagents booting at once; the others wait their turn, in order.

A subagent is *booting* from the moment its spawn is let in until it has made its first model
call, sent anything after `ev/ready` that shows it is working, or ended — the part of its life that
burns CPU (copy-on-write faults after the fork, building its loop and client). Hundreds booting at
once on a small machine each take a CPU share of their own (every subagent is a session, hence a
scheduler autogroup, of its own), so the daemon, one process among them, answered clients in
seconds. With the window, a burst boots K at a time and the daemon competes with K.

Waiters are let in strictly first come, first served. A waiter that is cancelled (its task was
cancelled or the daemon drains) leaves the queue; a place handed to it just then is passed on.
A place is released once (`Place.release` is idempotent), whatever path the spawn took.
"""

from __future__ import annotations

import collections

import anyio

# A booting child that shows no sign of work for this long after `ev/ready` (an MCP server that is
# slow to connect) gives its place up anyway: the window bounds CPU, not time spent waiting on I/O.
HOLD_AFTER_READY_S = 2.0


class Place:
    """One subagent's place in the window; `release` gives it to the next waiter."""

    __slots__ = ("_window", "released")

    def __init__(self, window: SpawnWindow | None) -> None:
        self._window = window
        self.released = window is None

    def release(self) -> None:
        if self.released:
            return
        self.released = True
        assert self._window is not None
        self._window._leave()


class SpawnWindow:
    """Bounds the subagents booting at once; `size` None or 0 bounds nothing."""

    def __init__(self, size: int | None) -> None:
        self.size = size or None
        self.inside = 0
        # The most that were ever inside at once (tests and benches read it).
        self.peak = 0
        self._queue: collections.deque[anyio.Event] = collections.deque()

    @property
    def waiting(self) -> int:
        return len(self._queue)

    async def enter(self) -> Place:
        """Wait for a place (first come, first served); cancellable while waiting."""
        if self.size is None:
            return Place(None)
        if self.inside < self.size and not self._queue:
            self._take()
            return Place(self)
        turn = anyio.Event()
        self._queue.append(turn)
        try:
            await turn.wait()
        except BaseException:
            if turn.is_set():
                self._leave()  # it was let in as it was cancelled: the place goes to the next
            else:
                self._queue.remove(turn)
            raise
        return Place(self)

    def _take(self) -> None:
        self.inside += 1
        self.peak = max(self.peak, self.inside)

    def _leave(self) -> None:
        self.inside -= 1
        if self._queue and self.size is not None and self.inside < self.size:
            self._take()
            self._queue.popleft().set()
