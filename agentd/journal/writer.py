"""The journal's single writer: a dedicated thread that group-commits every queued write.

Each turn the thread drains all queued operations, runs them in one transaction (a SAVEPOINT per
operation, so one operation's own failure does not fail the others), adds the buffered events,
COMMITs once (one fsync for the whole batch) and only then posts the batch as completed. It never
waits for the event loop: completions go into a deque and one byte into a non-blocking wake pipe
that the loop side reads. An environmental failure (disk full, I/O error, locked) rolls the whole
transaction back and fails every operation of the batch with `JournalUnavailable`.
"""

from __future__ import annotations

import os
import queue
import sqlite3
import threading
import time
from collections import OrderedDict, deque
from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import Any, Generic, TypeVar

import anyio

from agentd.errors import AgentdError, JournalError, JournalUnavailable
from agentd.journal.event_queries import insert_events, last_event_seq, trim_events
from agentd.journal.records import JournalHealth, JournalStats
from agentd.journal.schema import unavailable_reason

T = TypeVar("T")

# After a failed commit, buffered events are retried no sooner than this (writes with waiters
# still go through at once): a full disk should not be hammered ten times a second.
EVENT_RETRY_BACKOFF_S = 1.0
# Per-task last-seq cache entries kept; a miss costs one indexed max(seq) lookup.
_SEQ_CACHE_SIZE = 4096


class Pending(Generic[T]):
    """One write operation and, once completed, its outcome.

    Invariant: the writer thread sets exactly one of `value` / `error` and then posts the op;
    the loop side reads them only after `done` is set. `done` is touched only by the loop thread.
    """

    __slots__ = ("done", "due", "error", "fn", "stalled", "value", "wakes")

    def __init__(
        self, fn: Callable[[sqlite3.Connection], T], *, wakes: str | None = None, due: float = 0.0
    ) -> None:
        self.fn = fn
        # A task whose event followers should wake once this op commits (it ended).
        self.wakes = wakes
        self.done = anyio.Event()
        self.error: BaseException | None = None
        self.value: T
        # Loop side only: when its waiter gives up on it (event-loop clock), and whether it did.
        self.due = due
        self.stalled = False


@dataclass(frozen=True, slots=True)
class Completion:
    """A batch the writer finished: its ops, and tasks whose followers have something new."""

    ops: tuple[Pending[Any], ...]
    tasks: frozenset[str]
    stopped: bool = False


@dataclass(frozen=True, slots=True)
class _Event:
    task_id: str
    ts: float
    event: str
    fields_json: str


class _Wake:
    """Queue sentinel: buffered events need attention."""


class _Stop:
    """Queue sentinel: flush everything and exit."""


_WAKE = _Wake()
_STOP = _Stop()


class _BatchLost(AgentdError):
    """The batch's transaction is gone; carries the reason for every op in it."""


class JournalWriter:
    """Owns the write connection on its own thread. Thread-safe entry points: `submit`,
    `append_event`, `stop`; results come back through `completed` plus a byte on `wake_fd`."""

    def __init__(
        self,
        conn: sqlite3.Connection,
        *,
        wake_fd: int,
        flush_interval_s: float,
        flush_batch: int,
        events_per_task: int,
        event_buffer_max: int,
    ) -> None:
        self._conn = conn
        self._wake_fd = wake_fd
        self._flush_interval_s = flush_interval_s
        self._flush_batch = flush_batch
        self._events_per_task = events_per_task
        self._event_buffer_max = event_buffer_max
        self._queue: queue.SimpleQueue[Pending[Any] | _Wake | _Stop] = queue.SimpleQueue()
        self._events_lock = threading.Lock()
        # Invariant: whenever `_events` went from empty to non-empty, a `_WAKE` was queued after
        # that moment, so the thread never sleeps without a deadline while events are buffered.
        self._events: list[_Event] = []
        self._due_at = 0.0  # monotonic time the buffered events are to be committed by
        self._retry_at = 0.0  # monotonic; events-only flushes wait for this after a failure
        # Invariant: False once `stop` was called; later events would never be flushed.
        self._accepting = True
        # Invariant: holds only seqs that are committed; a failed batch leaves it untouched.
        self._last_seq: OrderedDict[str, int] = OrderedDict()
        self.completed: deque[Completion] = deque()
        self.health = JournalHealth()
        self._stats_lock = threading.Lock()
        self.stats = JournalStats()
        # Told each commit's duration (seconds) on this thread; set by the daemon's metrics.
        self.commit_observer: Callable[[float], None] | None = None
        self.closed = False
        self._thread = threading.Thread(target=self._run, name="agentd-journal-writer", daemon=True)

    # ---- any thread ----------------------------------------------------------------------------

    def start(self) -> None:
        self._thread.start()

    def submit(self, op: Pending[Any]) -> None:
        self._queue.put(op)

    def append_event(
        self, task_id: str, event: str, fields_json: str, ts: float, *, within_s: float | None = None
    ) -> None:
        """Buffer one event, committed within the flush interval, or `within_s` if sooner (someone
        follows the task live)."""
        item = _Event(task_id, ts, event, fields_json)
        now = time.monotonic()
        with self._events_lock:
            if not self._accepting or len(self._events) >= self._event_buffer_max:
                self._count(events_dropped=1)
                return
            was_empty = not self._events
            if was_empty:
                self._due_at = now + self._flush_interval_s
            sooner = within_s is not None and now + within_s < self._due_at
            if sooner:
                self._due_at = now + (within_s or 0.0)
            self._events.append(item)
            full = len(self._events) == self._flush_batch
        if was_empty or full or sooner:
            self._queue.put(_WAKE)

    def stop(self) -> None:
        with self._events_lock:
            self._accepting = False
        self._queue.put(_STOP)

    def join(self, timeout_s: float) -> bool:
        self._thread.join(timeout_s)
        return not self._thread.is_alive()

    # ---- writer thread -------------------------------------------------------------------------

    def _run(self) -> None:
        try:
            stopping = False
            while not stopping:
                items = self._next_items()
                ops = tuple(item for item in items if isinstance(item, Pending))
                stopping = any(isinstance(item, _Stop) for item in items)
                events = self._take_events(force=bool(ops) or stopping)
                if ops or events:
                    self._commit(ops, events, final=stopping)
        except BaseException as exc:
            self._set_unhealthy(f"journal writer stopped: {exc!r}")
            raise
        finally:
            # Reached on stop and on a bug in this loop alike: nobody may wait for a dead writer.
            self.closed = True
            leftover = self._drain_queue()
            for op in leftover:
                op.error = JournalUnavailable("journal is closed")
            try:
                self._conn.close()
            except sqlite3.Error as exc:
                self._set_unhealthy(f"closing the journal failed: {exc}")
            self._post(Completion(leftover, frozenset(), stopped=True))

    def _next_items(self) -> list[Pending[Any] | _Wake | _Stop]:
        """Block until there is work (or buffered events fall due), then take all of it."""
        timeout = self._flush_wait_s()
        items: list[Pending[Any] | _Wake | _Stop] = []
        if timeout is None or timeout > 0:
            try:
                items.append(self._queue.get(timeout=timeout))
            except queue.Empty:
                pass
        return items + self._queued_nowait()

    def _drain_queue(self) -> tuple[Pending[Any], ...]:
        return tuple(item for item in self._queued_nowait() if isinstance(item, Pending))

    def _queued_nowait(self) -> list[Pending[Any] | _Wake | _Stop]:
        items: list[Pending[Any] | _Wake | _Stop] = []
        while True:
            try:
                items.append(self._queue.get_nowait())
            except queue.Empty:
                return items

    def _flush_wait_s(self) -> float | None:
        """How long the thread may sleep: None with no events buffered, else until they are due."""
        with self._events_lock:
            if not self._events:
                return None
            if len(self._events) >= self._flush_batch and time.monotonic() >= self._retry_at:
                return 0.0
            due = max(self._due_at, self._retry_at)
        return max(0.0, due - time.monotonic())

    def _take_events(self, *, force: bool) -> list[_Event]:
        now = time.monotonic()
        with self._events_lock:
            if not self._events:
                return []
            due = (len(self._events) >= self._flush_batch or now >= self._due_at) and now >= self._retry_at
            if not (force or due):
                return []
            events, self._events = self._events, []
            return events

    def _commit(self, ops: tuple[Pending[Any], ...], events: list[_Event], *, final: bool) -> None:
        conn = self._conn
        started = time.perf_counter()
        try:
            conn.execute("BEGIN IMMEDIATE")
            for op in ops:
                self._run_op(conn, op)
            tasks, new_seqs, dropped = self._write_events(conn, events) if events else (set(), {}, 0)
            conn.execute("COMMIT")
        except (sqlite3.Error, _BatchLost) as exc:
            self._fail_batch(conn, ops, events, exc, final=final)
            return
        observer = self.commit_observer
        if observer is not None:
            observer(time.perf_counter() - started)
        for task_id, seq in new_seqs.items():
            self._remember_seq(task_id, seq)
        self._count(
            commits=1, operations=len(ops), events_written=len(events) - dropped, events_dropped=dropped
        )
        if not self.health.healthy:
            self.health = replace(self.health, healthy=True)
        self._post(Completion(ops, frozenset(tasks)))

    def _run_op(self, conn: sqlite3.Connection, op: Pending[Any]) -> None:
        conn.execute("SAVEPOINT op")
        try:
            op.value = op.fn(conn)
        except sqlite3.Error as exc:
            if unavailable_reason(exc) is not None or not conn.in_transaction:
                raise _BatchLost(unavailable_reason(exc) or str(exc)) from exc
            self._undo_op(conn)
            op.error = JournalError(f"journal operation failed: {exc}")
        except JournalError as exc:
            self._undo_op(conn)
            op.error = exc
        except Exception as exc:  # noqa: BLE001 - a bug in one op: handed to its caller, who re-raises it
            self._undo_op(conn)
            op.error = exc
        else:
            conn.execute("RELEASE op")

    @staticmethod
    def _undo_op(conn: sqlite3.Connection) -> None:
        if not conn.in_transaction:
            raise _BatchLost("the transaction was rolled back")
        conn.execute("ROLLBACK TO op")
        conn.execute("RELEASE op")

    def _write_events(
        self, conn: sqlite3.Connection, events: list[_Event]
    ) -> tuple[set[str], dict[str, int], int]:
        by_task: dict[str, list[tuple[float, str, str]]] = {}
        for item in events:
            by_task.setdefault(item.task_id, []).append((item.ts, item.event, item.fields_json))
        new_seqs: dict[str, int] = {}
        dropped = 0
        for task_id, rows in by_task.items():
            last = self._last_seq.get(task_id)
            if last is None:
                last = last_event_seq(conn, task_id)
            conn.execute("SAVEPOINT ev")
            try:
                insert_events(conn, task_id, last + 1, rows)
            except sqlite3.IntegrityError:
                # Events for a task the journal does not know (foreign key): drop them, keep the rest.
                self._undo_events(conn)
                dropped += len(rows)
                continue
            conn.execute("RELEASE ev")
            last += len(rows)
            new_seqs[task_id] = last
            if last > self._events_per_task:
                trim_events(conn, task_id, keep_after=last - self._events_per_task)
        return set(new_seqs), new_seqs, dropped

    @staticmethod
    def _undo_events(conn: sqlite3.Connection) -> None:
        if not conn.in_transaction:
            raise _BatchLost("the transaction was rolled back")
        conn.execute("ROLLBACK TO ev")
        conn.execute("RELEASE ev")

    def _fail_batch(
        self,
        conn: sqlite3.Connection,
        ops: tuple[Pending[Any], ...],
        events: list[_Event],
        exc: BaseException,
        *,
        final: bool,
    ) -> None:
        reason = unavailable_reason(exc) if isinstance(exc, sqlite3.Error) else None
        message = f"journal write failed: {reason or exc}"
        try:
            if conn.in_transaction:
                conn.execute("ROLLBACK")
        except sqlite3.Error as rollback_exc:
            message += f" (rollback failed: {rollback_exc})"
        for op in ops:
            # One exception object per waiter: they are raised in different tasks.
            op.error = JournalUnavailable(message)
            op.error.__cause__ = exc
        self._set_unhealthy(message)
        self._count(failed_batches=1)
        if final:
            self._count(events_dropped=len(events))
        else:
            self._requeue_events(events)
        self._post(Completion(ops, frozenset()))

    def _requeue_events(self, events: list[_Event]) -> None:
        """Put a failed batch's events back in front of newer ones, within the buffer bound."""
        if not events:
            return
        now = time.monotonic()
        with self._events_lock:
            if not self._events:
                self._due_at = now + self._flush_interval_s
            merged = events + self._events
            overflow = max(0, len(merged) - self._event_buffer_max)
            self._events = merged[overflow:]
            self._retry_at = now + EVENT_RETRY_BACKOFF_S
        if overflow:
            self._count(events_dropped=overflow)

    def _remember_seq(self, task_id: str, seq: int) -> None:
        self._last_seq[task_id] = seq
        self._last_seq.move_to_end(task_id)
        if len(self._last_seq) > _SEQ_CACHE_SIZE:
            self._last_seq.popitem(last=False)

    def _set_unhealthy(self, message: str) -> None:
        self.health = JournalHealth(healthy=False, last_error=message, last_error_at=time.time())

    def _count(self, **deltas: int) -> None:
        # Replaced, not mutated, so a reader on another thread always sees a consistent snapshot;
        # both threads count (a full buffer drops events on the loop thread), hence the lock.
        with self._stats_lock:
            stats = self.stats
            self.stats = replace(stats, **{k: getattr(stats, k) + v for k, v in deltas.items()})

    def _post(self, completion: Completion) -> None:
        self.completed.append(completion)
        try:
            os.write(self._wake_fd, b"\0")
        except BlockingIOError:
            pass  # the pipe is full, so the loop side is already due to wake up
        except BrokenPipeError:
            pass  # the loop side has closed (a writer that outlived a bounded close)
