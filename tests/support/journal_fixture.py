"""The asyncio backend and a real journal in tmp_path, as fixtures: the supervision and trigger
tests' conftests import them (one definition instead of a copy per directory)."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from agentd.journal.store import Journal, JournalOptions, open_journal


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


@pytest.fixture
async def journal(tmp_path: Path) -> AsyncIterator[Journal]:
    async with open_journal(tmp_path / "state", JournalOptions(event_flush_interval_s=0.01)) as opened:
        yield opened
