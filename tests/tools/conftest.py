"""Setup shared by the tool-layer tests: the anyio backend (module-scoped so a module can share
one set of MCP servers across its tests)."""

from __future__ import annotations

import pytest


@pytest.fixture(scope="module")
def anyio_backend() -> str:
    return "asyncio"
