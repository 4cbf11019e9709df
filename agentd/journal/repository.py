"""What every repository of the journal stands on: its one write path and its read pool.

`Journal` (agentd/journal/store.py) owns both; each repository (tasks, schedules, approvals,
triggers, transcripts) is handed them and turns its concern's operations into SQL run through
them. So there is one writer, one group commit and one acknowledgement rule for every concern:
a write returns only once the COMMIT that holds it did.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Callable
from typing import Protocol, TypeVar

T = TypeVar("T")


class Write(Protocol):
    """Run `fn` on the writer connection in the next group commit; `wakes`: a task whose
    followers wake once it committed."""

    async def __call__(self, fn: Callable[[sqlite3.Connection], T], *, wakes: str | None = None) -> T: ...


class Read(Protocol):
    """Run `fn` on a read-only connection, off the event loop."""

    async def __call__(self, fn: Callable[[sqlite3.Connection], T]) -> T: ...


class Repository:
    """One concern's operations over the journal's writer and readers."""

    def __init__(self, write: Write, read: Read) -> None:
        self._write = write
        self._read = read
