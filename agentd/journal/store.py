"""The durable journal (docs/design.md §8): tasks, their trees and their events in `state_dir/agentd.db`.

`open_journal` locks the state directory, opens SQLite in WAL mode with `synchronous=FULL`, and
starts the single writer thread (`agentd.journal.writer`). Every write is acknowledged only after the
COMMIT that contains it returned, so a crash loses at most buffered events, never an acknowledged
submit or state transition. Reads run on read-only connections in worker threads; nothing here
blocks the event loop. Each concern's operations are a repository over that one write path and
read pool (`agentd.journal.repository`); `Journal` keeps what spans them.
"""

from __future__ import annotations

import functools
import json
import os
import sqlite3
import time
from collections import deque
from collections.abc import AsyncIterator, Callable, Iterable, Iterator, Mapping
from contextlib import asynccontextmanager, contextmanager, suppress
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

import anyio
import anyio.abc
from pydantic import JsonValue

from agentd.errors import JournalError, JournalUnavailable
from agentd.journal import event_queries as eq
from agentd.journal.approvals import Approvals
from agentd.journal.files import DB_NAME, open_state_dir
from agentd.journal.read_pool import ReadPool
from agentd.journal.records import (
    EventRecord,
    JournalHealth,
    JournalStats,
    NodeRecord,
    ScheduleRecord,
    TaskRecord,
    new_run_id,
    new_task_id,
)
from agentd.journal.schedules import Schedules
from agentd.journal.schema import connect_reader
from agentd.journal.spend import Spending
from agentd.journal.tasks import Tasks
from agentd.journal.transcripts import Transcripts
from agentd.journal.triggers import Triggers
from agentd.journal.writer import Completion, JournalWriter, Pending

__all__ = [
    "EventRecord",
    "Journal",
    "JournalHealth",
    "JournalOptions",
    "JournalStats",
    "NodeRecord",
    "ScheduleRecord",
    "TaskRecord",
    "new_run_id",
    "new_task_id",
    "open_journal",
]

T = TypeVar("T")

# How soon the events of a task that has live followers (`following`) are committed, at most.
FOLLOWED_FLUSH_S = 0.02


@dataclass(frozen=True, slots=True)
class JournalOptions:
    """Tuning knobs; the defaults are the production values."""

    # Buffered events are committed when the oldest is this old, or `event_flush_batch` are
    # waiting, whichever comes first (and with any durable write).
    event_flush_interval_s: float = 0.1
    event_flush_batch: int = 500
    # Retention: only the newest this-many events of each task are kept.
    events_per_task: int = 5000
    # Events waiting for a flush; beyond this (a long disk outage) new events are dropped.
    event_buffer_max: int = 100_000
    read_connections: int = 2
    # A write not committed within this is reported unavailable (the writer is stalled on I/O).
    write_timeout_s: float = 30.0
    # Closing waits this long for the writer's final flush.
    close_timeout_s: float = 10.0
    # A task's transcript past this keeps digests of its oldest tool results (None: unbounded).
    max_transcript_bytes: int | None = 16 * 1024 * 1024


class TouchedTasks:
    """The tasks later writes concern, gathered for one watcher of every task (`Journal.watching`)
    until it takes them."""

    __slots__ = ("_event", "_ids", "closed")

    def __init__(self) -> None:
        self._ids: set[str] = set()
        self._event = anyio.Event()
        self.closed = False

    def add(self, task_ids: set[str]) -> None:
        if task_ids:
            self._ids |= task_ids
            self._event.set()

    def close(self) -> None:
        self.closed = True
        self._event.set()

    async def wait(self) -> set[str]:
        """The tasks touched since the last call, once there is one (empty once the journal closed)."""
        await self._event.wait()
        self._event = anyio.Event()
        touched, self._ids = self._ids, set()
        return set() if self.closed else touched


class _Followers:
    """The follow-waiters of one task: one event, set (and replaced) when something new lands."""

    __slots__ = ("count", "event")

    def __init__(self) -> None:
        self.event = anyio.Event()
        self.count = 0


class Journal:
    """Async access to the journal. Obtain one with `open_journal`.

    Each concern is a repository over the one writer and read pool this object owns: `tasks`,
    `schedules`, `approvals`, `triggers`, `transcripts`. The journal itself keeps what spans them:
    its health, the events every task appends and their followers, and closing.
    """

    def __init__(
        self,
        state_dir: Path,
        writer: JournalWriter,
        readers: Iterable[sqlite3.Connection],
        options: JournalOptions,
    ) -> None:
        self.state_dir = state_dir
        self.db_path = state_dir / DB_NAME
        self._writer = writer
        self._pool = ReadPool(readers, lambda: self._closing)
        self._options = options
        self._followers: dict[str, _Followers] = {}
        self._watchers: set[TouchedTasks] = set()
        self._writer_stopped = anyio.Event()
        self._dispatch_scope: anyio.CancelScope | None = None
        self._watch_scope: anyio.CancelScope | None = None
        # Invariant: every write submitted and not yet completed, oldest first (the writer
        # completes them in that order); a completed one may linger until `_resolve` pops it.
        self._inflight: deque[Pending[Any]] = deque()
        # Set when a write is submitted while the stall watch sleeps with nothing in flight.
        self._watch_idle: anyio.Event | None = None
        # Invariant: once set, no new write reaches the writer queue (the stop sentinel is last).
        self._closing = False
        self.tasks = Tasks(self._write, self._read)
        self.schedules = Schedules(self._write, self._read)
        self.approvals = Approvals(self._write, self._read)
        self.triggers = Triggers(self._write, self._read)
        self.spending = Spending(self._write, self._read)
        self.transcripts = Transcripts(self._write, self._read, options.max_transcript_bytes)

    # ---- health ----------------------------------------------------------------------------------

    @property
    def healthy(self) -> bool:
        """False after a write failed, until a later write commits again."""
        return self._writer.health.healthy and not self._writer.closed

    @property
    def health(self) -> JournalHealth:
        """Health plus the last write error (for `daemon.status` and systemd `STATUS=`)."""
        return self._writer.health

    @property
    def last_error(self) -> str | None:
        return self._writer.health.last_error

    @property
    def stats(self) -> JournalStats:
        return self._writer.stats

    def observe_commits(self, observer: Callable[[float], None] | None) -> None:
        """Call `observer` with each commit's duration in seconds, on the writer thread (metrics)."""
        self._writer.commit_observer = observer

    # ---- the write path --------------------------------------------------------------------------

    async def flush_events(self) -> None:
        """Return once every event appended before this call is committed (a barrier)."""
        await self._write(_no_op)

    async def run_on_writer(self, fn: Callable[[sqlite3.Connection], T]) -> T:
        """Run `fn` on the write connection inside the next group-commit transaction.

        For maintenance and tests (e.g. `PRAGMA max_page_count`); `fn` must not COMMIT.
        """
        return await self._write(fn)

    async def _write(self, fn: Callable[[sqlite3.Connection], T], *, wakes: str | None = None) -> T:
        if self._closing or self._writer.closed:
            raise JournalUnavailable("journal is closed")
        # Bounded by `_watch_stalls`, one task for all writes, not by a timed cancel scope around
        # each wait: that scope (a timer armed and cancelled, anyio's scope bookkeeping) was the
        # biggest part of a write's cost on the event loop, several times per task.
        op = Pending(fn, wakes=wakes, due=anyio.current_time() + self._options.write_timeout_s)
        self._inflight.append(op)
        if self._watch_idle is not None:
            self._watch_idle.set()
            self._watch_idle = None
        self._writer.submit(op)
        # Cancelling this wait does not withdraw the write: it may still commit (callers retry
        # with an idempotency key).
        await op.done.wait()
        if op.stalled:
            raise JournalUnavailable(
                f"journal write not committed within {self._options.write_timeout_s:g} s (writer stalled)"
            )
        if op.error is not None:
            raise op.error
        return op.value

    async def _watch_stalls(self, *, task_status: anyio.abc.TaskStatus[None]) -> None:
        """Give up on every write not completed within `write_timeout_s` of its submit.

        Sleeps until the oldest write in flight falls due (or, with none, until one is
        submitted); shielded like `_dispatch`, and cancelled with it."""
        with anyio.CancelScope(shield=True) as scope:
            self._watch_scope = scope
            task_status.started()
            inflight = self._inflight
            while True:
                while inflight and inflight[0].done.is_set():
                    inflight.popleft()
                if not inflight:
                    self._watch_idle = idle = anyio.Event()
                    await idle.wait()
                    continue
                now = anyio.current_time()
                if inflight[0].due > now:
                    await anyio.sleep(inflight[0].due - now)
                    continue
                while inflight and inflight[0].due <= now:
                    op = inflight.popleft()
                    if not op.done.is_set():
                        op.stalled = True
                        op.done.set()

    # ---- events ----------------------------------------------------------------------------------

    def append_event(self, task_id: str, event: str, fields: Mapping[str, JsonValue] | None = None) -> None:
        """Buffer one event for `task_id` without blocking; the writer numbers and commits it.

        Raises TypeError at once if `fields` is not JSON-serialisable. After close, events are
        dropped (and counted in `stats.events_dropped`).
        """
        fields_json = json.dumps(dict(fields) if fields is not None else {}, separators=(",", ":"))
        # A task someone follows live has its events committed sooner: a follower sees an event
        # only once it is committed.
        within_s = FOLLOWED_FLUSH_S if task_id in self._followers else None
        self._writer.append_event(task_id, event, fields_json, time.time(), within_s=within_s)

    async def events_after(
        self, task_id: str, after_seq: int = 0, limit: int = 1000
    ) -> tuple[EventRecord, ...]:
        """Committed events of the task with `seq > after_seq`, oldest first, at most `limit`."""
        return await self._read(
            functools.partial(eq.events_after, task_id=task_id, after_seq=after_seq, limit=limit)
        )

    async def wait_events(self, task_id: str, after_seq: int, *, timeout_s: float) -> bool:
        """Wait until the task has an event with `seq > after_seq`, or it ends, or `timeout_s` passes.

        Returns whether events past `after_seq` exist (False after a timeout, if the task ended
        with nothing new, or when the journal closes). For `agentd logs --follow`: read, then
        wait, then read again.
        """
        # Registered before looking, so a flush landing between the two cannot be missed.
        with self.following(task_id) as landed:
            with anyio.move_on_after(timeout_s):
                if await self._last_seq(task_id) > after_seq:
                    return True
                await landed.wait()
            if self._closing:
                return False
            return await self._last_seq(task_id) > after_seq

    @contextmanager
    def following(self, task_id: str) -> Iterator[anyio.Event]:
        """An event set by the next write that concerns `task_id` (an event or a transcript step
        committed, the task ended). Enter before reading, so a write between the read and the
        wait is not missed."""
        followers = self._followers.get(task_id)
        if followers is None:
            followers = self._followers[task_id] = _Followers()
        followers.count += 1
        try:
            yield followers.event
        finally:
            followers.count -= 1
            if followers.count == 0 and self._followers.get(task_id) is followers:
                del self._followers[task_id]

    @contextmanager
    def watching(self) -> Iterator[TouchedTasks]:
        """The ids of the tasks each later write concerns (as for `following`, of every task)."""
        touched = TouchedTasks()
        if self._closing:
            touched.close()
        self._watchers.add(touched)
        try:
            yield touched
        finally:
            self._watchers.discard(touched)

    async def _last_seq(self, task_id: str) -> int:
        return await self._read(functools.partial(eq.last_event_seq, task_id=task_id))

    # ---- reads -----------------------------------------------------------------------------------

    async def _read(self, fn: Callable[[sqlite3.Connection], T]) -> T:
        return await self._pool.read(fn)

    # ---- completions (event loop) ----------------------------------------------------------------

    async def _dispatch(self, wake_fd: int, *, task_status: anyio.abc.TaskStatus[None]) -> None:
        """Resolve the waiters of every batch the writer completed, until `_stop_dispatch`.

        Shielded from outside cancellation: a cancelled `async with open_journal()` body must
        still see its close (the final flush) completed through this task.
        """
        with anyio.CancelScope(shield=True) as scope:
            self._dispatch_scope = scope
            task_status.started()
            while True:
                await anyio.wait_readable(wake_fd)
                with suppress(BlockingIOError):
                    while os.read(wake_fd, 4096):
                        pass
                while self._writer.completed:
                    self._resolve(self._writer.completed.popleft())

    def _stop_dispatch(self) -> None:
        for scope in (self._dispatch_scope, self._watch_scope):
            if scope is not None:
                scope.cancel()

    def _resolve(self, completion: Completion) -> None:
        woken = set(completion.tasks)
        for op in completion.ops:
            if op.error is None and op.wakes is not None:
                woken.add(op.wakes)
            op.done.set()
        inflight = self._inflight
        while inflight and inflight[0].done.is_set():
            inflight.popleft()
        for task_id in woken:
            followers = self._followers.pop(task_id, None)
            if followers is not None:
                followers.event.set()
        for watcher in self._watchers:
            watcher.add(woken)
        if completion.stopped:
            self._writer_stopped.set()

    async def _aclose(self) -> bool:
        """Flush and stop the writer (bounded); returns whether it stopped."""
        self._closing = True
        self._writer.stop()
        with anyio.move_on_after(self._options.close_timeout_s):
            await self._writer_stopped.wait()
        for followers in self._followers.values():
            followers.event.set()
        for watcher in self._watchers:
            watcher.close()
        if not self._writer_stopped.is_set():
            return False
        return await anyio.to_thread.run_sync(self._writer.join, self._options.close_timeout_s)

    @asynccontextmanager
    async def open_reads(self, connections: int) -> AsyncIterator[JournalReads]:
        """Read-only repositories over `connections` connections of their own, for the running
        event loop (another than the journal's); closed, once no read uses them, on exit."""

        def connect() -> list[sqlite3.Connection]:
            opened: list[sqlite3.Connection] = []
            try:
                opened.extend(connect_reader(self.db_path) for _ in range(connections))
            except sqlite3.Error as exc:
                for conn in opened:
                    conn.close()
                raise JournalError(f"cannot open journal {self.db_path}: {exc}") from exc
            return opened

        with anyio.CancelScope(shield=True):
            readers = await anyio.to_thread.run_sync(connect)
        pool = ReadPool(readers, lambda: self._closing)
        try:
            yield JournalReads(self, pool)
        finally:
            with anyio.CancelScope(shield=True):
                await pool.close(self._options.close_timeout_s)

    async def _close_readers(self) -> None:
        await self._pool.close(self._options.close_timeout_s)


class JournalReads:
    """The journal's read-only repositories over a read pool of their own, for another event loop
    (the API's): `tasks`, `schedules`, `approvals`. A write through them is refused."""

    def __init__(self, journal: Journal, pool: ReadPool) -> None:
        self._journal = journal
        self.tasks = Tasks(_refuse_write, pool.read)
        self.schedules = Schedules(_refuse_write, pool.read)
        self.approvals = Approvals(_refuse_write, pool.read)

    @property
    def health(self) -> JournalHealth:
        return self._journal.health


async def _refuse_write(fn: Callable[[sqlite3.Connection], T], *, wakes: str | None = None) -> T:
    del fn, wakes
    raise JournalError("a read view of the journal cannot write")


def _no_op(conn: sqlite3.Connection) -> None:
    del conn


@asynccontextmanager
async def open_journal(
    state_dir: Path | str, options: JournalOptions | None = None
) -> AsyncIterator[Journal]:
    """Lock `state_dir`, open (creating and migrating) its journal, and run the writer.

    Raises `JournalLocked` if another agentd holds the state directory. On exit, buffered
    events are flushed and the writer is stopped (bounded by `close_timeout_s`).
    """
    options = options or JournalOptions()
    state = Path(state_dir)
    # Shielded: a cancel arriving mid-open would otherwise drop the opened lock and connections.
    with anyio.CancelScope(shield=True):
        lock_fd, writer_conn, readers = await anyio.to_thread.run_sync(
            open_state_dir, state, max(1, options.read_connections)
        )
    wake_r, wake_w = os.pipe2(os.O_NONBLOCK | os.O_CLOEXEC)
    writer = JournalWriter(
        writer_conn,
        wake_fd=wake_w,
        flush_interval_s=options.event_flush_interval_s,
        flush_batch=options.event_flush_batch,
        events_per_task=options.events_per_task,
        event_buffer_max=options.event_buffer_max,
    )
    journal = Journal(state, writer, readers, options)
    stopped = False
    body_error: BaseException | None = None
    unwrapped: BaseException | None = None
    try:
        async with anyio.create_task_group() as tg:
            await tg.start(journal._dispatch, wake_r)
            await tg.start(journal._watch_stalls)
            writer.start()
            try:
                yield journal
            except BaseException as exc:
                body_error = exc
                raise
            finally:
                with anyio.CancelScope(shield=True):
                    stopped = await journal._aclose()
                    await journal._close_readers()
                journal._stop_dispatch()
    except BaseExceptionGroup as group:
        # The task group wraps an error of the `async with` body; hand it back unwrapped (the
        # dispatcher itself raises nothing), so callers catch `KeyError`, not a group.
        if body_error is None or list(group.exceptions) != [body_error]:
            raise
        unwrapped = body_error
    finally:
        # A writer that did not stop (stalled on I/O) still owns the connection and may write
        # the pipe: then keep the lock, so no second agentd opens the database under it. Both
        # go at process exit.
        if stopped:
            os.close(wake_w)
            os.close(lock_fd)  # releases the flock
        os.close(wake_r)
    if unwrapped is not None:
        raise unwrapped
