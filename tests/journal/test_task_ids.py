"""Finding tasks by the start of their id: the caller's own only, in id order, bounded."""

from __future__ import annotations

import pytest

from agentd.journal.store import Journal
from protocol.api import TaskSpec

pytestmark = pytest.mark.anyio


async def _submit(journal: Journal, owner_uid: int) -> str:
    record, _ = await journal.tasks.submit(TaskSpec(instruction="x"), owner_uid=owner_uid)
    return record.task_id


async def test_a_prefix_finds_the_tasks_whose_id_starts_with_it_and_only_the_owners(journal: Journal) -> None:
    mine = sorted([await _submit(journal, 1) for _ in range(3)])
    theirs = await _submit(journal, 2)

    assert await journal.tasks.match_ids(mine[1], 1, 10) == (mine[1],)
    assert await journal.tasks.match_ids(mine[1][:-1], 1, 10) == (mine[1],)  # 75 random bits in common
    assert await journal.tasks.match_ids("t_", 1, 10) == tuple(mine)
    assert await journal.tasks.match_ids("t_", 1, 2) == tuple(mine[:2])
    # Another uid's task is not found, as if it did not exist; an admin (None) sees every task.
    assert await journal.tasks.match_ids(theirs, 1, 10) == ()
    assert await journal.tasks.match_ids("t_", None, 10) == tuple(sorted([*mine, theirs]))
    assert await journal.tasks.match_ids("t_ZZZZ", 1, 10) == ()
    assert await journal.tasks.match_ids("s_", None, 10) == ()
