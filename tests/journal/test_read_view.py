"""`Journal.open_reads`: another event loop's read-only view of the journal, over connections of its
own (the API's loop reads through one, docs/decisions.md "API reads on a loop of their own")."""

from __future__ import annotations

import anyio
import pytest

from agentd.errors import JournalError
from agentd.journal.store import Journal
from protocol.api import TaskSpec

pytestmark = pytest.mark.anyio


async def test_a_read_view_answers_from_its_own_loop_what_the_journal_committed(journal: Journal) -> None:
    record, _ = await journal.tasks.submit(TaskSpec(instruction="read me"), owner_uid=7)

    async def read_elsewhere() -> tuple[str | None, int]:
        async with journal.open_reads(2) as reads:
            got = await reads.tasks.get(record.task_id)
            return (got.spec.instruction if got is not None else None), (await reads.tasks.counts(7))[
                "queued"
            ]

    # A loop of its own in another thread, as the API's.
    instruction, queued = await anyio.to_thread.run_sync(anyio.run, read_elsewhere)
    assert (instruction, queued) == ("read me", 1)


async def test_a_read_view_refuses_writes(journal: Journal) -> None:
    async with journal.open_reads(1) as reads:
        with pytest.raises(JournalError, match="cannot write"):
            await reads.tasks.submit(TaskSpec(instruction="no"), owner_uid=7)
    assert await journal.tasks.counts(7) == {"queued": 0, "starting": 0, "running": 0}
