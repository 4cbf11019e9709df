"""Fixtures of the warm-session tests: the asyncio backend and a fake model server."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.support.fake_llm import FakeLLM


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


@pytest.fixture
def fake_llm() -> Iterator[FakeLLM]:
    with FakeLLM() as fake:
        yield fake
