"""A request to a limited endpoint asks the supervisor for a slot first and reports its end.

The daemon holds the provider limits of the whole fleet (docs/budgets.md); this is the child's
side of `sup/slot` / `ev/slot`. An endpoint without limits (`EndpointSpec.limited` false) costs
nothing: no frame is sent. The wait counts against the run's deadline (the caller's cancel scope
bounds it) and is not a turn, so a throttled run is never judged idle.
"""

from __future__ import annotations

import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from typing import Protocol

from pydantic import JsonValue

from protocol import control
from protocol.spawn import EndpointSpec
from subagent.errors import IntelTransient


class SlotLink(Protocol):
    """How slots are asked for and given back (the control channel, in a subagent)."""

    async def request(self, method: str, params: dict[str, JsonValue]) -> JsonValue: ...

    def notify(self, message: control.SlotDone) -> None: ...


@dataclass
class SlotOutcome:
    """What the request that held a slot came to; filled in by the caller before the slot ends.
    `waited_s` is how long the slot took to come, the round trip to the supervisor included."""

    waited_s: float | None = None
    tokens_used: int | None = None
    status: int | None = None
    retry_after_s: float | None = None
    rate_headers: dict[str, str] = field(default_factory=dict)


def estimate_tokens(spec: EndpointSpec, request_bytes: int) -> int:
    """A request's tokens before it is sent: its size at ~4 bytes a token, plus the most it may
    answer (a provider's tokens-per-minute counts both)."""
    return request_bytes // 4 + (spec.max_output_tokens or 0)


class Slots:
    """The slots of one subagent's requests."""

    def __init__(self, link: SlotLink) -> None:
        self._link = link

    @asynccontextmanager
    async def held(self, spec: EndpointSpec, request_bytes: int) -> AsyncIterator[SlotOutcome]:
        """Hold a slot of `spec` for the block (none when it has no limits); the block fills the
        yielded outcome, which the slot's end reports, however the block ends."""
        outcome = SlotOutcome()
        if not spec.limited:
            yield outcome
            return
        params = control.SlotParams(endpoint=spec.name, tokens=estimate_tokens(spec, request_bytes))
        asked = time.perf_counter()
        try:
            answer = await self._link.request("sup/slot", params.model_dump(mode="json"))
        except RuntimeError as exc:
            # The supervisor answered with an error (its bound on the wait passed): the request
            # was not sent, and may be tried again like any transport failure.
            raise IntelTransient(f"no slot of endpoint {spec.name!r}: {exc}") from exc
        ticket = control.SlotResult.model_validate(answer).ticket
        outcome.waited_s = time.perf_counter() - asked
        try:
            yield outcome
        finally:
            done = control.SlotDoneParams(
                endpoint=spec.name,
                ticket=ticket,
                tokens_used=outcome.tokens_used,
                status=outcome.status,
                retry_after_s=outcome.retry_after_s,
                rate_headers=outcome.rate_headers,
            )
            self._link.notify(control.SlotDone(params=done))
