"""The journal's queue as the scheduler last read it, kept current by the submits it is told of.

Without it the scheduler read the queue (a worker-thread hop and each owner's oldest N tasks
decoded again) at every wake, i.e. once or twice per task that started or ended. Now it
reads `READ_PER_OWNER` of each owner's oldest tasks at once and serves its picks from that copy:
a task this daemon acknowledged is appended (it is the newest), a task it starts is removed. The
copy is only trusted while nothing else could have changed the queue unseen: anything that queues
or ends a task without handing over its record (a schedule's or trigger's fire, a cancel, a timed
wake of the scheduler) makes it stale, and the next pick reads the journal again. An owner whose
tasks filled the read (more may wait in the journal) is read again once its copy runs short.

Not thread-safe: the scheduler's event loop only. Pure bookkeeping; the read itself is the
caller's.
"""

from __future__ import annotations

import itertools
from collections import Counter

from agentd.journal.records import TaskRecord

# Each owner's oldest tasks read at once (at least; more when the scheduler wants more per owner).
READ_PER_OWNER = 64


def first_per_owner(
    records: list[TaskRecord] | tuple[TaskRecord, ...], per_owner: int
) -> tuple[tuple[TaskRecord, ...], Counter[int]]:
    """Each owner's first `per_owner` of `records` (order kept), and how many each had."""
    counts: Counter[int] = Counter()
    picked = []
    for record in records:
        if counts[record.owner_uid] < per_owner:
            counts[record.owner_uid] += 1
            picked.append(record)
    return tuple(picked), counts


class QueueCache:
    """Each owner's queued tasks in an insertion-ordered dict, so that a pick costs what it returns
    and a start is one removal: a burst of submits used to make both a scan of the whole copy,
    i.e. quadratic in the queue's length."""

    def __init__(self) -> None:
        # Invariant: when not None, these are every queued task of each owner not in `_cut`, and
        # the oldest of each owner in `_cut`, in submission order (as far as this daemon knows).
        self._owners: dict[int, dict[str, TaskRecord]] | None = None
        self._position: dict[str, int] = {}  # task id -> its place in submission order
        self._next = itertools.count()
        self._cut: set[int] = set()
        # While a read is in flight: records acknowledged meanwhile, and whether it went stale.
        self._reading = False
        self._arrived: list[TaskRecord] = []
        self._lost = False

    def read_size(self, per_owner: int) -> int:
        """How many of each owner's tasks a read should fetch."""
        return max(READ_PER_OWNER, 4 * per_owner)

    def pick(self, per_owner: int) -> tuple[TaskRecord, ...] | None:
        """Each owner's oldest `per_owner` tasks in submission order; None: read the journal."""
        owners = self._owners
        if owners is None:
            return None
        if any(len(owners.get(owner, ())) < per_owner for owner in self._cut):
            return None  # an owner's copy ran short while the journal may hold more of its tasks
        picked = [
            record for queued in owners.values() for record in itertools.islice(queued.values(), per_owner)
        ]
        if len(owners) > 1:
            picked.sort(key=lambda record: self._position[record.task_id])
        return tuple(picked)

    def begin_read(self) -> None:
        self._reading, self._arrived, self._lost = True, [], False

    def end_read(self, read: tuple[TaskRecord, ...] | None, per_owner: int) -> bool:
        """The read's result (`per_owner` each at most), or None when it failed. True when the
        read may be started from: not when it went stale in flight, since a task it lists may
        have left the queue meanwhile."""
        self._reading = False
        arrived, self._arrived = self._arrived, []
        if read is None or self._lost:
            self._owners = None
            return False
        self._owners, self._position = {}, {}
        for record in read:
            self._add(record)
        self._cut = {owner for owner, queued in self._owners.items() if len(queued) >= per_owner}
        for record in arrived:
            self.submitted(record)
        return True

    def submitted(self, record: TaskRecord) -> None:
        """`record` was just committed `queued`: the newest task of its owner. The caller
        guarantees it was not taken yet (else it would be listed, and started, again)."""
        if self._reading:
            self._arrived.append(record)
        elif (
            self._owners is not None
            and record.owner_uid not in self._cut
            and record.task_id not in self._position  # else a read found it committed first
        ):
            self._add(record)

    def taken(self, record: TaskRecord) -> None:
        """The scheduler started `record`: it is no longer queued."""
        if self._owners is not None and self._position.pop(record.task_id, None) is not None:
            queued = self._owners[record.owner_uid]
            del queued[record.task_id]
            if not queued:
                del self._owners[record.owner_uid]

    def stale(self) -> None:
        """The queue may have changed unseen: read the journal at the next pick."""
        self._owners = None
        if self._reading:
            self._lost = True

    def _add(self, record: TaskRecord) -> None:
        assert self._owners is not None
        self._owners.setdefault(record.owner_uid, {})[record.task_id] = record
        self._position[record.task_id] = next(self._next)
