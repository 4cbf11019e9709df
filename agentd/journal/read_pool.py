"""A pool of read-only SQLite connections used from worker threads of one event loop.

The journal reads through one pool on the supervisor's loop; the API's loop reads through a pool of
its own (`Journal.open_reads`), because a pool's limiter belongs to the loop that made it. Each
read borrows a connection for one worker thread, so nothing here blocks an event loop.
"""

from __future__ import annotations

import sqlite3
from collections import deque
from collections.abc import Callable, Iterable
from typing import TypeVar

import anyio

from agentd.errors import JournalError, JournalUnavailable
from agentd.journal.schema import unavailable_reason

T = TypeVar("T")


class ReadPool:
    """Read-only connections lent to worker threads of the loop that made the pool."""

    def __init__(self, readers: Iterable[sqlite3.Connection], closing: Callable[[], bool]) -> None:
        # Invariant: holds every reader not in use by a read thread; the limiter's token count
        # equals the pool size, so a thread admitted by the limiter always finds one here.
        self._readers = deque(readers)
        self._count = len(self._readers)
        self._limiter = anyio.CapacityLimiter(self._count)
        self._closing = closing

    async def read(self, fn: Callable[[sqlite3.Connection], T]) -> T:
        if self._closing():
            raise JournalUnavailable("journal is closed")
        return await anyio.to_thread.run_sync(self._read_sync, fn, limiter=self._limiter)

    def _read_sync(self, fn: Callable[[sqlite3.Connection], T]) -> T:
        conn = self._readers.pop()
        try:
            return fn(conn)
        except sqlite3.Error as exc:
            reason = unavailable_reason(exc)
            if reason is not None:
                raise JournalUnavailable(f"journal read failed: {reason}") from exc
            raise JournalError(f"journal read failed: {exc}") from exc
        finally:
            self._readers.append(conn)

    async def close(self, timeout_s: float) -> None:
        """Close every connection once no read uses it (waiting at most `timeout_s`)."""
        with anyio.move_on_after(timeout_s):
            for _ in range(self._count):
                await self._limiter.acquire_on_behalf_of(object())
            for conn in self._readers:
                conn.close()
