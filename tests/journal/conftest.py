"""Fixtures for the journal tests: the anyio backend, a journal in a temporary state dir with fast
event flushing, and `writer_held`, which parks the writer thread so tests can line up a batch."""

from __future__ import annotations

import sys
import threading
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path

import anyio
import pytest

from agentd.journal.store import Journal, JournalOptions, open_journal

FAST = JournalOptions(event_flush_interval_s=0.01, close_timeout_s=5.0)
HOLD_LIMIT_S = 10.0
# A separate process using a journal (see journal_child.py).
CHILD = [sys.executable, "-m", "tests.journal.journal_child"]


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


@pytest.fixture
def state_dir(tmp_path: Path) -> Path:
    return tmp_path / "state"


@pytest.fixture
async def journal(state_dir: Path) -> AsyncIterator[Journal]:
    async with open_journal(state_dir, FAST) as opened:
        yield opened


@asynccontextmanager
async def writer_held(journal: Journal) -> AsyncIterator[None]:
    """Keep the writer busy inside a batch until the block exits.

    Writes issued inside the block queue up behind it, so on exit they all land in the next batch
    (callers make sure they were issued with `anyio.wait_all_tasks_blocked()`).
    """
    entered = threading.Event()
    release = threading.Event()

    def park(conn: object) -> None:
        entered.set()
        release.wait(HOLD_LIMIT_S)

    async with anyio.create_task_group() as tg:
        tg.start_soon(journal.run_on_writer, park)
        with anyio.fail_after(HOLD_LIMIT_S):
            await anyio.to_thread.run_sync(entered.wait, HOLD_LIMIT_S)
        try:
            yield
        finally:
            release.set()
