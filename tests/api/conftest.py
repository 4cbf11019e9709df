"""API tests run on asyncio, against a real server on a real unix socket in `tmp_path`."""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import pytest

from tests.api.harness import Server, serving, serving_on_own_loop


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


@pytest.fixture
def socket_path(tmp_path: Path) -> Path:
    return tmp_path / "run" / "agentd.sock"


@pytest.fixture(autouse=True, params=[False, True], ids=["one-loop", "own-loop"])
def api_loop(request: pytest.FixtureRequest) -> Iterator[bool]:
    """Every test here twice: the server on the test's loop, and on a loop of its own as the
    daemon runs it (`serving`)."""
    with serving_on_own_loop(request.param):
        yield request.param


@pytest.fixture
async def server(socket_path: Path) -> AsyncIterator[Server]:
    """A server with default limits and an empty in-memory backend."""
    async with serving(socket_path) as running:
        yield running
