"""Fixtures for the intel tests: the anyio backend, fast knobs, endpoint specs for the
session-wide `fake_llm` (tests/conftest.py), and a sink that records events so tests can assert
on `intel.call` / `intel.result`."""

from __future__ import annotations

from typing import Any

import anyio
import pytest
from pydantic import JsonValue

from protocol.events import EventName
from protocol.spawn import EndpointSpec, LoopKnobs
from tests.support.fake_llm import FakeLLM

# Tiny backoffs keep retry tests fast; the retry plan itself is tested with real values.
FAST_KNOBS = LoopKnobs(transport_retries=2, backoff_initial_s=0.001, backoff_max_s=0.004)


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


class RecordingSink:
    """An `EventSink` that keeps every event, in order."""

    def __init__(self) -> None:
        self.events: list[tuple[EventName, dict[str, JsonValue]]] = []
        self._wakeup: anyio.Event | None = None

    def __call__(self, event: EventName, fields: dict[str, JsonValue]) -> None:
        self.events.append((event, fields))
        if self._wakeup is not None:
            self._wakeup.set()

    async def wait_results(self, count: int) -> None:
        """Wait until `count` `intel.result` events were emitted (bound it with `fail_after`)."""
        while len(self.results()) < count:
            self._wakeup = anyio.Event()
            await self._wakeup.wait()

    def results(self) -> list[dict[str, JsonValue]]:
        return [f for e, f in self.events if e == "intel.result"]

    def calls(self) -> list[dict[str, JsonValue]]:
        return [f for e, f in self.events if e == "intel.call"]


@pytest.fixture
def sink() -> RecordingSink:
    return RecordingSink()


def openai_spec(fake: FakeLLM, **overrides: Any) -> EndpointSpec:
    fields: dict[str, Any] = {"kind": "openai", "base_url": fake.base_url, "model": "fake-model"}
    return EndpointSpec(**(fields | overrides))


def anthropic_spec(fake: FakeLLM, **overrides: Any) -> EndpointSpec:
    fields: dict[str, Any] = {"kind": "anthropic", "base_url": fake.base_url, "model": "fake-claude"}
    return EndpointSpec(**(fields | overrides))
