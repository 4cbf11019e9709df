"""Each task's transcripts (docs/durability.md): the steps every node's subagent handed over, in
order, one row per item (protocol/transcript.py). A small repository over the journal's one
writer: appends commit in the writer's group commit, reads run on the read connections.
"""

from __future__ import annotations

import functools
import hashlib
import sqlite3
import time
from collections.abc import Sequence
from dataclasses import dataclass

from agentd.journal.repository import Read, Repository, Write
from protocol.transcript import STEP_ITEM_ADAPTER, ResultItem, SpawnedItem, StepItem

# A tool result this small is kept as it is even past the cap: its digest would not be shorter.
DIGEST_FLOOR = 512


@dataclass(frozen=True, slots=True)
class StepRecord:
    """One journaled item of a node's transcript: its place (`seq`, from 1) and when it came."""

    task_id: str
    handle: str
    seq: int
    ts: float
    item: StepItem


def append_items(
    conn: sqlite3.Connection, *, task_id: str, handle: str, items: Sequence[StepItem], now: float
) -> int:
    last = conn.execute(
        "SELECT COALESCE(MAX(seq), 0) FROM steps WHERE task_id = ? AND handle = ?", (task_id, handle)
    ).fetchone()[0]
    bodies = [item.model_dump_json() for item in items]
    sizes = [len(body.encode()) for body in bodies]
    conn.executemany(
        "INSERT INTO steps (task_id, handle, seq, ts, kind, body, bytes) VALUES (?, ?, ?, ?, ?, ?, ?)",
        [
            (task_id, handle, last + i, now, item.kind, body, size)
            for i, (item, body, size) in enumerate(zip(items, bodies, sizes, strict=True), start=1)
        ],
    )
    conn.execute(
        "UPDATE tasks SET transcript_bytes = transcript_bytes + ? WHERE task_id = ?", (sum(sizes), task_id)
    )
    return int(last) + len(items)


def digested(item: ResultItem) -> ResultItem:
    """A tool result whose body is not kept: its size and digest stand in for it."""
    body = item.text.encode()
    digest = hashlib.sha256(body).hexdigest()[:16]
    text = (
        f"[not kept: a {len(body):,}-byte result (sha256 {digest}…); "
        "this task's transcript is over [journal] max_transcript_bytes]"
    )
    return item.model_copy(update={"text": text})


def keep_within(conn: sqlite3.Connection, *, task_id: str, max_bytes: int) -> int:
    """Digest the task's oldest tool-result bodies until its transcript is within `max_bytes`
    (or none is left to digest); returns how many bytes that gave back."""
    total = conn.execute("SELECT transcript_bytes FROM tasks WHERE task_id = ?", (task_id,)).fetchone()
    if total is None or total[0] <= max_bytes:
        return 0
    over, freed = total[0] - max_bytes, 0
    rows = conn.execute(
        "SELECT handle, seq, body, bytes FROM steps WHERE task_id = ? AND kind = 'result' AND bytes > ?"
        " ORDER BY ts, handle, seq",
        (task_id, DIGEST_FLOOR),
    ).fetchall()
    for handle, seq, body, size in rows:
        if freed >= over:
            break
        item = STEP_ITEM_ADAPTER.validate_json(body)
        assert isinstance(item, ResultItem)
        short = digested(item).model_dump_json()
        conn.execute(
            "UPDATE steps SET body = ?, bytes = ? WHERE task_id = ? AND handle = ? AND seq = ?",
            (short, len(short.encode()), task_id, handle, seq),
        )
        freed += size - len(short.encode())
    conn.execute(
        "UPDATE tasks SET transcript_bytes = transcript_bytes - ? WHERE task_id = ?", (freed, task_id)
    )
    return freed


def _append_within(
    conn: sqlite3.Connection,
    *,
    task_id: str,
    handle: str,
    items: Sequence[StepItem],
    now: float,
    max_bytes: int | None,
) -> int:
    count = append_items(conn, task_id=task_id, handle=handle, items=items, now=now)
    if max_bytes is not None:
        keep_within(conn, task_id=task_id, max_bytes=max_bytes)
    return count


def _read(
    conn: sqlite3.Connection, *, task_id: str, handle: str, after_seq: int, limit: int | None
) -> list[StepRecord]:
    rows = conn.execute(
        "SELECT seq, ts, body FROM steps WHERE task_id = ? AND handle = ? AND seq > ? ORDER BY seq LIMIT ?",
        (task_id, handle, after_seq, -1 if limit is None else limit),
    )
    return [
        StepRecord(task_id, handle, row[0], row[1], STEP_ITEM_ADAPTER.validate_json(row[2])) for row in rows
    ]


def _handles(conn: sqlite3.Connection, *, task_id: str) -> list[str]:
    rows = conn.execute("SELECT DISTINCT handle FROM steps WHERE task_id = ?", (task_id,))
    return sorted((row[0] for row in rows), key=lambda h: [int(p) for p in h.split(".")])


def _children(conn: sqlite3.Connection, *, task_id: str) -> dict[str, str | None]:
    rows = conn.execute(
        "SELECT handle, kind, body FROM steps WHERE task_id = ? AND seq = 1 AND handle != '0'", (task_id,)
    )
    children: dict[str, str | None] = {}
    for handle, kind, body in rows:
        item = STEP_ITEM_ADAPTER.validate_json(body) if kind == "spawned" else None
        children[handle] = item.call_id if isinstance(item, SpawnedItem) else None
    return children


class Transcripts(Repository):
    """Append and read nodes' transcripts. A task's transcript past `max_bytes` keeps digests of
    its oldest tool results instead of their bodies."""

    def __init__(self, write: Write, read: Read, max_bytes: int | None = None) -> None:
        super().__init__(write, read)
        self.max_bytes = max_bytes

    async def append(self, task_id: str, handle: str, items: Sequence[StepItem]) -> int:
        """Journal `items` after the node's last; returns how many it holds now (committed)."""
        fn = functools.partial(
            _append_within,
            task_id=task_id,
            handle=handle,
            items=items,
            now=time.time(),
            max_bytes=self.max_bytes,
        )
        # Wakes the task's followers (`agentd transcript --follow`).
        return await self._write(fn, wakes=task_id)

    async def items(
        self, task_id: str, handle: str = "0", *, after_seq: int = 0, limit: int | None = None
    ) -> list[StepRecord]:
        """The node's items with `seq > after_seq`, oldest first (all of them without `limit`)."""
        fn = functools.partial(_read, task_id=task_id, handle=handle, after_seq=after_seq, limit=limit)
        return await self._read(fn)

    async def children(self, task_id: str) -> dict[str, str | None]:
        """Every nested node of the task with a transcript, and the parent's tool call that
        spawned it (None: not known)."""
        return await self._read(functools.partial(_children, task_id=task_id))

    async def handles(self, task_id: str) -> list[str]:
        """The nodes of the task that have a transcript, root first."""
        return await self._read(functools.partial(_handles, task_id=task_id))
