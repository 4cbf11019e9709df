"""What the task pages of one dashboard share: each task's events read so far, extended by asking
the daemon only for newer ones (or fed by the task's live follow, `dashboard/fanout.py`), and the
task's summary (view, tree, timeline), reused for `fresh_s` — so ten pages open on one live task
cost the daemon about what one page does.

Every page of a dashboard is its one user's, so sharing between them shows nobody anything new.
"""

from __future__ import annotations

import json
import time
from collections import OrderedDict
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field

import anyio
from pydantic import JsonValue

from agentd.api.async_port import DaemonPort
from dashboard.views import timeline, tree
from protocol.api import EventView, GetRequest, TaskRef, TaskView, TreeRequest

FRESH_S = 0.25  # a summary this young is served again
# An ended task's events are all committed this soon after its end was read (the journal commits
# buffered events within 0.1 s): a summary made later is final and served from then on.
SETTLED_S = 1.0
KEEP_TASKS = 64  # tasks whose events are kept, least recently asked first out
KEEP_EVENTS = 5000  # per task: the daemon keeps no more (`daemon.max_events_per_task`'s default)


@dataclass(slots=True)
class _Entry:
    lock: anyio.Lock = field(default_factory=anyio.Lock)
    events: list[EventView] = field(default_factory=list)
    # The cache holds every event after this seq (more than 0 once old ones were let go).
    complete_after: int = 0
    # A live follow feeds `events`: a summary need not read them.
    followed: bool = False
    summary: dict[str, JsonValue] | None = None
    made_at: float = 0.0
    # The task as it ended, and when the end was first read.
    ended: TaskView | None = None
    ended_seen: float = 0.0

    def settled(self, now: float) -> bool:
        """Whether the task ended long enough ago that what is held is all there will be."""
        return self.ended is not None and now - self.ended_seen >= SETTLED_S

    @property
    def last_seq(self) -> int:
        return self.events[-1].seq if self.events else self.complete_after

    def add(self, events: Iterable[EventView]) -> list[EventView]:
        """Append the events newer than the newest held (a follow and a read may overlap); the
        ones appended."""
        added = [event for event in events if event.seq > self.last_seq]
        self.events += added
        if len(self.events) > KEEP_EVENTS:
            self.complete_after = self.events[-KEEP_EVENTS - 1].seq
            del self.events[:-KEEP_EVENTS]
        return added


class TaskSummaries:
    """Events and summaries of the tasks the pages show, over the daemon at `port`."""

    def __init__(
        self, port: DaemonPort, *, fresh_s: float = FRESH_S, clock: Callable[[], float] = time.monotonic
    ) -> None:
        self._port = port
        self._fresh_s = fresh_s
        self._clock = clock
        self._entries: OrderedDict[str, _Entry] = OrderedDict()

    async def summary(self, task_id: str) -> dict[str, JsonValue]:
        """The task, its tree and its timeline as a page draws them.

        Raises:
            ApiClientError: the daemon refused (no such task of the caller's) or is unreachable.
        """
        entry = self._entry(task_id)
        async with entry.lock:  # pages asking at once wait for one read
            if entry.summary is not None and (
                self._clock() - entry.made_at < self._fresh_s or entry.settled(entry.made_at)
            ):
                return entry.summary
            return await self._refresh(task_id, entry)

    async def refreshed(self, task_id: str) -> str:
        """A new summary of the task as JSON text (for the pages that follow it)."""
        entry = self._entry(task_id)
        async with entry.lock:
            return json.dumps(await self._refresh(task_id, entry), separators=(",", ":"))

    async def backlog(self, task_id: str, after_seq: int) -> tuple[list[EventView], TaskView | None]:
        """The task's events after `after_seq`, read from the daemon only past what is held; and
        the task's view when it was read (None: the live follow keeps the events)."""
        entry = self._entry(task_id)
        async with entry.lock:
            view: TaskView | None = None  # followed: the follow brings the end
            if not entry.followed and entry.settled(self._clock()):
                view = entry.ended
            elif not entry.followed:
                newer, view = await self._port.events(task_id, entry.last_seq)
                entry.add(newer)
                self._saw(entry, view)
            if after_seq >= entry.complete_after:
                return [event for event in entry.events if event.seq > after_seq], view
        # Older than what is held: read by itself (rare: a task past KEEP_EVENTS events).
        events, view = await self._port.events(task_id, after_seq)
        return events, view

    def last_seq(self, task_id: str) -> int:
        return self._entry(task_id).last_seq

    def following(self, task_id: str, on: bool) -> None:
        self._entry(task_id).followed = on

    def add_live(self, task_id: str, events: Iterable[EventView]) -> list[EventView]:
        """Events the live follow brought; those not held before."""
        return self._entry(task_id).add(events)

    async def _refresh(self, task_id: str, entry: _Entry) -> dict[str, JsonValue]:
        ref = TaskRef(task_id=task_id)
        task = await self._port.call(GetRequest(params=ref))
        nodes = await self._port.call(TreeRequest(params=ref))
        if not entry.followed:
            newer, _ = await self._port.events(task_id, entry.last_seq)
            entry.add(newer)
        self._saw(entry, task)
        nested: list[JsonValue] = list(tree(nodes))
        entry.summary = {
            "task": task.model_dump(mode="json"),
            "tree": nested,
            "timeline": [span.as_json() for span in timeline(entry.events)],
            "last_seq": entry.last_seq,
        }
        entry.made_at = self._clock()
        return entry.summary

    def _saw(self, entry: _Entry, view: TaskView) -> None:
        if view.state == "terminal" and entry.ended is None:
            entry.ended, entry.ended_seen = view, self._clock()

    def _entry(self, task_id: str) -> _Entry:
        entry = self._entries.pop(task_id, None) or _Entry()
        self._entries[task_id] = entry
        while len(self._entries) > KEEP_TASKS:
            # The least recently asked one no follow feeds.
            unfed = next((t for t, e in self._entries.items() if not e.followed), None)
            if unfed is None:
                break
            del self._entries[unfed]
        return entry
