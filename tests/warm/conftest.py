"""Fixtures of the warm-session tests: the asyncio backend (the fake model server is the
session-wide `fake_llm`, tests/conftest.py)."""

from __future__ import annotations

import pytest


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"
