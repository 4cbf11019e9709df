"""The daemon's streaming reads from the journal: one task's events (`task.events`) and the
changes of every task a caller may see (`task.watch`).

Both wait on the journal's wake-ups (a write that concerns a task committed) rather than polling;
the ownership rule is the caller's to apply (`task.events` checks it before it starts, `task.watch`
through `visible` on every task it reads).
"""

from __future__ import annotations

from collections.abc import AsyncGenerator, Callable

import anyio

from agentd.journal.records import TaskRecord
from agentd.journal.store import Journal
from protocol.api import EventsParams, EventView, TaskView, WatchParams

# How long a follower waits for a wake-up before it looks at the task again anyway.
FOLLOW_POLL_S = 5.0
EVENTS_PAGE = 500
# Tasks whose last sent state a `task.watch` remembers before it forgets the ended ones.
WATCH_REMEMBERED = 10_000


async def task_events(journal: Journal, params: EventsParams) -> AsyncGenerator[EventView, None]:
    """The task's events after `params.after_seq`; with `follow`, until the task is terminal.

    A follower registers for the journal's wake-up before each read, so a commit landing during the
    read wakes it at once, and it looks at the task's state only when a read found nothing new: a
    wake-up costs one read."""
    seq = params.after_seq
    while True:
        with journal.following(params.task_id) as landed:
            batch = await journal.events_after(params.task_id, seq, EVENTS_PAGE)
            for event in batch:
                seq = event.seq
                yield event.to_view()
            if len(batch) == EVENTS_PAGE:
                continue
            if not params.follow:
                return
            if not batch:
                record = await journal.tasks.get(params.task_id)
                if record is None or record.state == "terminal":
                    await journal.flush_events()
                    for event in await journal.events_after(params.task_id, seq, 10_000):
                        yield event.to_view()
                    return
            with anyio.move_on_after(FOLLOW_POLL_S):
                await landed.wait()


async def task_changes(
    journal: Journal, params: WatchParams, visible: Callable[[TaskRecord], TaskView | None]
) -> AsyncGenerator[TaskView, None]:
    """First the views of `params.task_ids`, then each task whose state or status changed, of
    those `visible` shows (None: not the caller's); it ends when the journal closes."""
    # The state and status last sent of each task sent (ended ones forgotten past a bound).
    sent: dict[str, tuple[str, str | None]] = {}
    with journal.watching() as touched:
        pending = set(params.task_ids)  # watched before they are read: no change is missed
        while True:
            records = sorted(await journal.tasks.get_many(sorted(pending)), key=_task_id)
            for view in filter(None, map(visible, records)):
                if sent.get(view.task_id) == (view.state, view.status):
                    continue
                sent[view.task_id] = (view.state, view.status)
                if len(sent) > WATCH_REMEMBERED:
                    sent = {t: state for t, state in sent.items() if state[0] != "terminal"}
                yield view
            pending = await touched.wait()
            if not pending and touched.closed:
                return


def _task_id(record: TaskRecord) -> str:
    return record.task_id
