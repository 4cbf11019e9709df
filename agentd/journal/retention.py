"""What the journal keeps of ended tasks (docs/durability.md, "Retention"): a task's transcript
is deleted `transcript_retention` after the task ended, and the task itself — its row, events,
nodes, approvals and transcript — `task_retention` after. The freed pages go back to the file
system in small steps (`PRAGMA incremental_vacuum`), so the file shrinks without a full VACUUM.

`prune` runs on the writer, one bounded batch per call; `serve_retention` calls it periodically.
"""

from __future__ import annotations

import functools
import sqlite3
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Protocol, TypeVar

import anyio

from agentd import logs
from agentd.errors import JournalError

T = TypeVar("T")
# Tasks handled per batch: one writer transaction stays short, and a backlog drains over batches.
BATCH = 500
# How often the pass runs, and the pages one pass gives back at most.
INTERVAL_S = 600.0
VACUUM_PAGES = 2000
SPEND_KEPT_S = 2 * 86400.0


@dataclass(frozen=True, slots=True)
class Retention:
    """How long ended tasks are kept: their transcripts, and the tasks themselves (seconds)."""

    task_s: float = 30 * 86400.0
    transcript_s: float = 30 * 86400.0


@dataclass(frozen=True, slots=True)
class Pruned:
    transcripts: int = 0
    tasks: int = 0


def prune(conn: sqlite3.Connection, *, retention: Retention, now: float, batch: int = BATCH) -> Pruned:
    """Delete up to `batch` ended tasks' transcripts and up to `batch` ended tasks past retention."""
    stale = [
        row[0]
        for row in conn.execute(
            "SELECT DISTINCT s.task_id FROM steps s JOIN tasks t ON t.task_id = s.task_id"
            " WHERE t.state = 'terminal' AND t.ended_at < ? LIMIT ?",
            (now - retention.transcript_s, batch),
        )
    ]
    conn.executemany("DELETE FROM steps WHERE task_id = ?", [(t,) for t in stale])
    old = [
        row[0]
        for row in conn.execute(
            "SELECT task_id FROM tasks WHERE state = 'terminal' AND ended_at < ? ORDER BY seq LIMIT ?",
            (now - retention.task_s, batch),
        )
    ]
    for table in ("steps", "events", "nodes", "approvals"):
        conn.executemany(f"DELETE FROM {table} WHERE task_id = ?", [(t,) for t in old])
    conn.executemany("DELETE FROM tasks WHERE task_id = ?", [(t,) for t in old])
    # The daily caps read one day back at most (of a zone up to 14 hours from UTC): keep two.
    conn.execute("DELETE FROM spend WHERE bucket < ?", (now - SPEND_KEPT_S,))
    return Pruned(transcripts=len(stale), tasks=len(old))


def give_back(conn: sqlite3.Connection) -> None:
    """Return up to `VACUUM_PAGES` free pages to the file system (a journal created before
    auto_vacuum was incremental keeps its size: it needs one offline `VACUUM`)."""
    free = int(conn.execute("PRAGMA freelist_count").fetchone()[0])
    # Python's sqlite3 steps a statement that returns no rows once, and each step of this pragma
    # frees one page: hence one statement per page.
    for _ in range(min(free, VACUUM_PAGES)):
        conn.execute("PRAGMA incremental_vacuum(1)")


class Writer(Protocol):
    """The journal's `run_on_writer`: `fn` inside the next group-commit transaction."""

    async def run_on_writer(self, fn: Callable[[sqlite3.Connection], T]) -> T: ...


async def prune_now(journal: Writer, retention: Retention) -> Pruned:
    """Prune until a batch comes back short; the total."""
    total = Pruned()
    while True:
        pruned = await journal.run_on_writer(functools.partial(prune, retention=retention, now=time.time()))
        total = Pruned(total.transcripts + pruned.transcripts, total.tasks + pruned.tasks)
        if pruned.transcripts < BATCH and pruned.tasks < BATCH:
            break
    if total.transcripts or total.tasks:
        await journal.run_on_writer(give_back)
    return total


async def serve_retention(journal: Writer, retention: Retention) -> None:
    """Prune every `INTERVAL_S` (first at once: a daemon started after a long stop catches up)."""
    log = logs.get()
    while True:
        try:
            pruned = await prune_now(journal, retention)
            if pruned.tasks or pruned.transcripts:
                log.info("journal.pruned", tasks=pruned.tasks, transcripts=pruned.transcripts)
        except JournalError as exc:
            log.warning("journal.pruned", err=str(exc))
        await anyio.sleep(INTERVAL_S)
