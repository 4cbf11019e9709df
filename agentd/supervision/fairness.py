"""Which queued task starts next: round robin across owners, not first in first out (docs/design.md §14).

Pure. One user's hundred queued tasks must not make another user's one task wait behind all of
them: each owner's next task is ranked by how many of that owner's tasks already run plus how many
of its own are ahead of it in the queue; ties go to the owner served longest ago (never served
first), then to the oldest submission.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping, Sequence

from agentd.journal.records import TaskRecord


def fair_order(
    queued: Sequence[TaskRecord], running_by_owner: Mapping[int, int], last_started: Mapping[int, int]
) -> list[TaskRecord]:
    """`queued` (in submission order) reordered so owners take turns, those running least first.

    `last_started` maps an owner to the sequence number of its latest start (larger = more recent).
    """
    ahead: Counter[int] = Counter()
    keyed = []
    for position, record in enumerate(queued):
        owner = record.owner_uid
        share = running_by_owner.get(owner, 0) + ahead[owner]
        keyed.append(((share, last_started.get(owner, -1), position), record))
        ahead[owner] += 1
    return [record for _, record in sorted(keyed, key=lambda item: item[0])]


def at_owner_cap(running: int, cap: int | None) -> bool:
    """Whether an owner with `running` tasks may start no more (`[daemon] max_running_per_uid`).
    A task waiting for a person's approval runs (its subagent lives) and counts until it is
    parked (`park_approval_after`)."""
    return cap is not None and running >= cap
