"""A request to a limited endpoint asks the supervisor for a slot first and reports its end.

The daemon holds the provider limits of the whole fleet (docs/budgets.md); this is the child's
side of `sup/slot` / `ev/slot`. While the endpoint is far from its limits the supervisor hands the
child a standing slot (`ctrl/lease`): the next request starts under it at once and reports its
start (`ev/slot-start`) instead of asking; one called back (`ctrl/unlease`) before it is used
goes back unused. An endpoint without limits (`EndpointSpec.limited` false) costs nothing: no
frame is sent. The wait counts against the run's deadline (the caller's cancel scope bounds it)
and is not a turn, so a throttled run is never judged idle.
"""

from __future__ import annotations

import threading
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from typing import Protocol

from pydantic import JsonValue

from protocol import control
from protocol.spawn import EndpointSpec
from subagent.errors import IntelTransient

# Call-backs remembered for a standing slot not come yet; those of slots already used are never
# claimed, and this bounds them.
MAX_CALLED_BACK = 64


class SlotLink(Protocol):
    """How slots are asked for and given back (the control channel, in a subagent)."""

    async def request(self, method: str, params: dict[str, JsonValue]) -> JsonValue: ...

    def notify(self, message: control.SlotDone | control.SlotStart) -> None: ...


@dataclass
class SlotOutcome:
    """What the request that held a slot came to; filled in by the caller before the slot ends.
    `waited_s` is how long the slot took to come, the round trip to the supervisor included;
    `standing`: it was a standing slot (no round trip)."""

    waited_s: float | None = None
    standing: bool = False
    tokens_used: int | None = None
    status: int | None = None
    retry_after_s: float | None = None
    rate_headers: dict[str, str] = field(default_factory=dict)


def estimate_tokens(spec: EndpointSpec, request_bytes: int) -> int:
    """A request's tokens before it is sent: its size at ~4 bytes a token, plus the most it may
    answer (a provider's tokens-per-minute counts both)."""
    return request_bytes // 4 + (spec.max_output_tokens or 0)


class Slots:
    """The slots of one subagent's requests. Standing slots come on the control thread and are
    taken on the event loop: a lock makes taking one and giving it back on a call-back exclusive."""

    def __init__(self, link: SlotLink) -> None:
        self._link = link
        self._lock = threading.Lock()
        # endpoint -> the standing slot held and not used yet.
        self._standing: dict[str, control.LeaseParams] = {}
        # Tickets called back before (or after) they were held: one that comes later goes back.
        self._called_back: set[int] = set()

    def on_lease(self, message: control.Lease | control.Unlease) -> None:
        """The supervisor handed out a standing slot, or calls one back (any thread)."""
        with self._lock:
            self._on_lease(message)

    def _on_lease(self, message: control.Lease | control.Unlease) -> None:
        params = message.params
        if isinstance(message, control.Lease):
            if params.ticket in self._called_back:
                self._called_back.discard(params.ticket)
                self._give_back(message.params)
                return
            previous = self._standing.get(params.endpoint)
            self._standing[params.endpoint] = message.params
            if previous is not None:
                self._give_back(previous)
        elif (held := self._standing.get(params.endpoint)) is not None and held.ticket == params.ticket:
            del self._standing[params.endpoint]
            self._give_back(held)
        elif len(self._called_back) < MAX_CALLED_BACK:
            # Used already (its request's end gives it back), or not come yet.
            self._called_back.add(params.ticket)

    def _give_back(self, lease: control.LeaseParams) -> None:
        done = control.SlotDoneParams(endpoint=lease.endpoint, ticket=lease.ticket, tokens_used=0)
        self._link.notify(control.SlotDone(params=done))

    def _take_standing(self, spec: EndpointSpec, tokens: int) -> int | None:
        """The ticket of a standing slot for a request of `tokens`, its start reported; None: ask."""
        with self._lock:
            lease = self._standing.get(spec.name)
            if lease is None or (lease.tokens is not None and tokens > lease.tokens):
                return None
            del self._standing[spec.name]
        started = control.SlotStartParams(endpoint=spec.name, ticket=lease.ticket, tokens=tokens)
        self._link.notify(control.SlotStart(params=started))
        return lease.ticket

    @asynccontextmanager
    async def held(self, spec: EndpointSpec, request_bytes: int) -> AsyncIterator[SlotOutcome]:
        """Hold a slot of `spec` for the block (none when it has no limits); the block fills the
        yielded outcome, which the slot's end reports, however the block ends."""
        outcome = SlotOutcome()
        if not spec.limited:
            yield outcome
            return
        tokens = estimate_tokens(spec, request_bytes)
        asked = time.perf_counter()
        ticket = self._take_standing(spec, tokens)
        outcome.standing = ticket is not None
        if ticket is None:
            ticket = await self._ask(spec, tokens)
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

    async def _ask(self, spec: EndpointSpec, tokens: int) -> int:
        params = control.SlotParams(endpoint=spec.name, tokens=tokens)
        try:
            answer = await self._link.request("sup/slot", params.model_dump(mode="json"))
        except RuntimeError as exc:
            # The supervisor answered with an error (its bound on the wait passed): the request
            # was not sent, and may be tried again like any transport failure.
            raise IntelTransient(f"no slot of endpoint {spec.name!r}: {exc}") from exc
        return control.SlotResult.model_validate(answer).ticket
