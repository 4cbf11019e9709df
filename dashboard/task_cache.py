"""What the task pages of one dashboard share: each task's events read so far, extended by asking
the daemon only for newer ones, and the task's summary (view, tree, timeline), reused for
`fresh_s` — so ten pages open on one live task cost the daemon about what one page does.

Every page of a dashboard is its one user's, so sharing between them shows nobody anything new.
"""

from __future__ import annotations

import time
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass, field

import anyio
from pydantic import JsonValue

from agentd.api.async_port import DaemonPort
from dashboard.views import timeline, tree
from protocol.api import EventView, GetRequest, TaskRef, TreeRequest

FRESH_S = 0.25  # a summary this young is served again (pages refresh at most twice a second)
KEEP_TASKS = 64  # tasks whose events are kept, least recently asked first out
KEEP_EVENTS = 5000  # per task: the daemon keeps no more (`daemon.max_events_per_task`'s default)


@dataclass(slots=True)
class _Entry:
    lock: anyio.Lock = field(default_factory=anyio.Lock)
    events: list[EventView] = field(default_factory=list)
    summary: dict[str, JsonValue] | None = None
    made_at: float = 0.0


class TaskSummaries:
    """Summaries of the tasks the pages show, over the daemon at `port`."""

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
            if entry.summary is not None and self._clock() - entry.made_at < self._fresh_s:
                return entry.summary
            ref = TaskRef(task_id=task_id)
            task = await self._port.call(GetRequest(params=ref))
            nodes = await self._port.call(TreeRequest(params=ref))
            after = entry.events[-1].seq if entry.events else 0
            newer, _ = await self._port.events(task_id, after)
            entry.events = (entry.events + newer)[-KEEP_EVENTS:]
            nested: list[JsonValue] = list(tree(nodes))
            entry.summary = {
                "task": task.model_dump(mode="json"),
                "tree": nested,
                "timeline": [span.as_json() for span in timeline(entry.events)],
                "last_seq": entry.events[-1].seq if entry.events else 0,
            }
            entry.made_at = self._clock()
            return entry.summary

    def _entry(self, task_id: str) -> _Entry:
        entry = self._entries.pop(task_id, None) or _Entry()
        self._entries[task_id] = entry
        while len(self._entries) > KEEP_TASKS:
            self._entries.popitem(last=False)
        return entry
