"""The journal's queue as the scheduler last read it, kept current by the submits it is told of.

Without it the scheduler read the queue (a worker-thread hop and each owner's oldest N tasks
decoded again) at every wake, i.e. once or twice per task that started or ended (issue 16). Now it
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
    def __init__(self) -> None:
        # Invariant: when not None, these are every queued task of each owner not in `_cut`, and
        # the oldest of each owner in `_cut`, in submission order (as far as this daemon knows).
        self._records: list[TaskRecord] | None = None
        self._ids: set[str] = set()
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
        if self._records is None:
            return None
        picked, counts = first_per_owner(self._records, per_owner)
        if any(counts[owner] < per_owner for owner in self._cut):
            return None  # an owner's copy ran short while the journal may hold more of its tasks
        return picked

    def begin_read(self) -> None:
        self._reading, self._arrived, self._lost = True, [], False

    def end_read(self, read: tuple[TaskRecord, ...] | None, per_owner: int) -> None:
        """The read's result (`per_owner` each at most), or None when it failed."""
        self._reading = False
        arrived, self._arrived = self._arrived, []
        if read is None or self._lost:
            self._records = None
            return
        counts = Counter(record.owner_uid for record in read)
        self._cut = {owner for owner, count in counts.items() if count >= per_owner}
        self._records = list(read)
        self._ids = {record.task_id for record in read}
        for record in arrived:
            self.submitted(record)

    def submitted(self, record: TaskRecord) -> None:
        """`record` was just committed `queued`: the newest task of its owner. The caller
        guarantees it was not taken yet (else it would be listed, and started, again)."""
        if self._reading:
            self._arrived.append(record)
        elif self._records is not None and record.owner_uid not in self._cut:
            if record.task_id in self._ids:
                return  # a read found it committed before its submit was acknowledged
            self._records.append(record)
            self._ids.add(record.task_id)

    def taken(self, record: TaskRecord) -> None:
        """The scheduler started `record`: it is no longer queued."""
        if self._records is not None and record.task_id in self._ids:
            self._ids.discard(record.task_id)
            self._records = [r for r in self._records if r.task_id != record.task_id]

    def stale(self) -> None:
        """The queue may have changed unseen: read the journal at the next pick."""
        self._records = None
        if self._reading:
            self._lost = True
