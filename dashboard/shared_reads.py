"""Reads the pages of one dashboard share besides a task's events and summary (`task_cache.py`):
a node's transcript, extended by asking the daemon only for the steps after the last one held, and
a page of the task list, reused for `LIST_FRESH_S` or until one `task.watch` of the daemon reports
a change — so pages that look again on a timer cost the daemon one read between them, not one each.

Every page of a dashboard is its one user's, so sharing between them shows nobody anything new.
"""

from __future__ import annotations

import time
from collections import OrderedDict
from collections.abc import Callable, Hashable
from dataclasses import dataclass, field
from typing import Generic, TypeVar

import anyio
import anyio.abc

from agentd.api.async_port import DaemonPort
from agentd.errors import ApiClientError
from protocol.api import (
    ListParams,
    ListRequest,
    TaskView,
    TranscriptParams,
    TranscriptRequest,
    TranscriptView,
)

TRANSCRIPT_FRESH_S = 1.0  # a live transcript is read again at most this often
LIST_FRESH_S = 1.0  # and a page of the task list (its steps and tokens change with no state change)
WATCH_IDLE_S = 10.0  # the list's watch of the daemon ends when no page asked for this long
KEEP = 64  # transcripts (and list pages) held, least recently asked first out

ValueT = TypeVar("ValueT")


@dataclass(slots=True)
class _Held(Generic[ValueT]):
    lock: anyio.Lock = field(default_factory=anyio.Lock)
    value: ValueT | None = None
    read_at: float = float("-inf")  # never read
    changes: int = 0  # `TaskLists`: the count of changes seen when it was read


class _Recent(Generic[ValueT]):
    """The last `KEEP` values asked for, by key."""

    def __init__(self) -> None:
        self._held: OrderedDict[Hashable, _Held[ValueT]] = OrderedDict()

    def get(self, key: Hashable) -> _Held[ValueT]:
        held = self._held.pop(key, None) or _Held[ValueT]()
        self._held[key] = held
        while len(self._held) > KEEP:
            self._held.popitem(last=False)
        return held


class Transcripts:
    """Nodes' transcripts as the task page shows them: the first page of steps (`limit`)."""

    def __init__(
        self,
        port: DaemonPort,
        *,
        fresh_s: float = TRANSCRIPT_FRESH_S,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._port = port
        self._fresh_s = fresh_s
        self._clock = clock
        self._recent = _Recent[TranscriptView]()

    async def page(self, params: TranscriptParams) -> TranscriptView:
        """The steps after `params.after_seq`; from the start, those held and then only newer ones.

        Raises:
            ApiClientError: the daemon refused (no such task of the caller's) or is unreachable.
        """
        if params.after_seq or params.wait_s:
            return await self._port.call(TranscriptRequest(params=params))  # a later page: as asked
        held = self._recent.get((params.task_id, params.handle, params.limit))
        async with held.lock:
            known = held.value
            fresh = self._clock() - held.read_at < self._fresh_s
            if known is not None and (fresh or _complete(known, params)):
                return known
            steps = known.steps if known is not None else []
            newer = params.model_copy(
                update={"after_seq": steps[-1].seq if steps else 0, "limit": params.limit - len(steps)}
            )
            read = await self._port.call(TranscriptRequest(params=newer))
            both = [*steps, *read.steps]
            held.value = read.model_copy(update={"steps": both, "next_seq": both[-1].seq if both else 0})
            held.read_at = self._clock()
            return held.value


def _complete(view: TranscriptView, params: TranscriptParams) -> bool:
    """Nothing more can come into this page: it is full, or its task ended and all was read."""
    return len(view.steps) >= params.limit or (view.state == "terminal" and not view.more)


class TaskLists:
    """Pages of the task list, each read once for every page that shows it within `fresh_s`, and
    read again at once after any of the caller's tasks changed state: while pages keep asking,
    one `task.watch` of the daemon (in the server's task group, `attach`) says when."""

    def __init__(
        self, port: DaemonPort, *, fresh_s: float = LIST_FRESH_S, clock: Callable[[], float] = time.monotonic
    ) -> None:
        self._port = port
        self._fresh_s = fresh_s
        self._clock = clock
        self._recent = _Recent[list[TaskView]]()
        self._group: anyio.abc.TaskGroup | None = None
        self._watching = False
        self._live = False  # the watch answered: the daemon reports every change from here on
        self._asked_at = 0.0
        self._changes = 0  # bumped by each change the watch reports: what was read before is old

    def attach(self, group: anyio.abc.TaskGroup) -> None:
        self._group = group

    async def page(self, params: ListParams) -> list[TaskView]:
        """The daemon's answer to `task.list` with `params`.

        Raises:
            ApiClientError: as for `DaemonPort.call`.
        """
        if self._group is None:
            return await self._port.call(ListRequest(params=params))
        self._asked_at = self._clock()
        held = self._recent.get(params.model_dump_json())
        async with held.lock:
            fresh = self._clock() - held.read_at < self._fresh_s and held.changes == self._changes
            if held.value is not None and self._live and fresh:
                return held.value
            held.changes = self._changes
            held.value = await self._port.call(ListRequest(params=params))
            held.read_at = self._clock()
            if not self._watching and held.value:
                # Watched from these tasks on: the daemon's first answer (their views) says the
                # watch is in place, and only then is a list read kept.
                self._watching = True
                self._group.start_soon(self._watch, [task.task_id for task in held.value])
            return held.value

    async def _watch(self, task_ids: list[str]) -> None:
        """Note each change of the caller's tasks until no page asked for `WATCH_IDLE_S`."""
        try:
            async with self._port.open_watch(task_ids) as changes:
                while self._clock() - self._asked_at < WATCH_IDLE_S:
                    with anyio.move_on_after(WATCH_IDLE_S):
                        if isinstance(await changes.receive(), ApiClientError):
                            return
                        self._live = True
                        self._changes += 1
        except anyio.EndOfStream:
            pass
        finally:
            self._watching = self._live = False
            self._changes += 1
