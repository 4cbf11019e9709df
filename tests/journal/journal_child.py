"""A separate process that uses a journal, for tests where the process boundary is under test.

python -m tests.journal.journal_child submit STATE_DIR
    open the journal, submit forever from 8 concurrent submitters, print `acked <task_id>`
    (flushed) after each acknowledged submit; never exits on its own (the test SIGKILLs it).
python -m tests.journal.journal_child open STATE_DIR
    try to open the journal: print `opened` and exit 0, or print the error and exit 3 if the
    state dir is locked.
"""

from __future__ import annotations

import sys

import anyio

from agentd.errors import JournalLocked
from agentd.journal.store import open_journal
from protocol.api import TaskSpec

SUBMITTERS = 8
LOCKED_EXIT = 3


async def submit_forever(state_dir: str) -> None:
    async with open_journal(state_dir) as journal:

        async def submitter(n: int) -> None:
            i = 0
            while True:
                record, _ = await journal.tasks.submit(TaskSpec(instruction=f"{n}/{i}"), owner_uid=1000)
                print(f"acked {record.task_id}", flush=True)
                i += 1

        async with anyio.create_task_group() as tg:
            for n in range(SUBMITTERS):
                tg.start_soon(submitter, n)


async def try_open(state_dir: str) -> int:
    try:
        async with open_journal(state_dir):
            print("opened", flush=True)
    except JournalLocked as exc:
        print(exc, flush=True)
        return LOCKED_EXIT
    return 0


def main() -> int:
    mode, state_dir = sys.argv[1], sys.argv[2]
    if mode == "submit":
        anyio.run(submit_forever, state_dir)
        return 0
    return anyio.run(try_open, state_dir)


if __name__ == "__main__":
    sys.exit(main())
