"""One subagent's model-request slots: its `sup/slot` requests and `ev/slot` reports, in front of
the daemon's provider desk (docs/budgets.md).

A request that waited for a limit is journaled as `intel.throttled` with the wait. While its
endpoint is far from its limits the node's child holds a standing slot (`ctrl/lease`), so its next
request starts without a round trip; it is offered one when it is ready and after each request.
The slots a node still holds when it ends (it was killed mid-request) are given back then, so a
dead child never keeps a slot.
"""

from __future__ import annotations

import random
import time
from collections.abc import Callable

import anyio
from pydantic import BaseModel, JsonValue

from agentd.supervision.provider_backoff import backoff_hold
from agentd.supervision.provider_desk import ProviderDesk
from protocol import control
from protocol.events import EventName

Journal = Callable[[EventName, dict[str, JsonValue]], None]
# Sends a frame to the node's child without waiting (`SupervisedChild.tell`).
Tell = Callable[[BaseModel], None]
# Spreads the end of each shared hold, so the held requests do not all start in one instant.
_JITTER = random.Random()


def _no_journal(event: EventName, fields: dict[str, JsonValue]) -> None:
    pass


class NodeSlots:
    """The slots of one node of one task."""

    def __init__(
        self, desk: ProviderDesk | None, *, owner: int, task_id: str, deadline: float, journal: Journal
    ) -> None:
        self._desk = desk
        self._owner = owner
        self._task_id = task_id
        self._deadline = deadline
        self._journal = journal
        # ticket -> endpoint of each slot the node holds, standing slots included.
        self._held: dict[int, str] = {}
        # endpoint -> ticket of the standing slot the child holds unused (at most one an endpoint).
        self._standing: dict[str, int] = {}
        self._tell: Tell | None = None

    @classmethod
    def none(cls) -> NodeSlots:
        """The slots of a node that has no child yet: it holds none."""
        return cls(None, owner=0, task_id="", deadline=0.0, journal=_no_journal)

    def offer(self, endpoint: str, tell: Tell) -> None:
        """Hand the child a standing slot of `endpoint` if it holds none and the endpoint is far
        from its limits."""
        desk = self._desk
        if desk is None or not desk.limited(endpoint) or endpoint in self._standing:
            return
        self._tell = tell
        grant = desk.lease(endpoint, self._call_back)
        if grant is None:
            return
        self._held[grant.ticket] = endpoint
        self._standing[endpoint] = grant.ticket
        lease = control.LeaseParams(endpoint=endpoint, ticket=grant.ticket, tokens=grant.tokens)
        tell(control.Lease(params=lease))

    def started(self, params: control.SlotStartParams) -> None:
        """A request started under a standing slot."""
        if self._held.get(params.ticket) != params.endpoint or self._desk is None:
            return
        if self._standing.get(params.endpoint) == params.ticket:
            del self._standing[params.endpoint]
        self._desk.start_leased(params.endpoint, params.ticket, params.tokens)

    def _call_back(self, ticket: int) -> None:
        endpoint = self._held.get(ticket)
        if endpoint is not None and self._tell is not None:
            self._tell(control.Unlease(params=control.UnleaseParams(endpoint=endpoint, ticket=ticket)))

    def take_nowait(self, params: control.SlotParams) -> JsonValue | None:
        """A slot of `params.endpoint` if one is free now and no other request waits for one;
        None: `take` waits for it."""
        desk = self._desk
        if desk is None or not desk.limited(params.endpoint):
            return control.SlotResult(ticket=0).model_dump(mode="json")
        grant = desk.acquire_nowait(
            params.endpoint, owner=self._owner, task_id=self._task_id, tokens=params.tokens
        )
        if grant is None:
            return None
        self._held[grant.ticket] = params.endpoint
        return control.SlotResult(ticket=grant.ticket, waited_ms=0).model_dump(mode="json")

    async def take(self, params: control.SlotParams) -> JsonValue:
        """A slot of `params.endpoint`, waiting for its limits; bounded by `deadline` (the node's,
        plus the backstop, so the child's own deadline ends the wait first).

        Raises:
            LookupError: no slot came in time (the child is past its deadline anyway).
        """
        desk = self._desk
        if desk is None or not desk.limited(params.endpoint):
            return control.SlotResult(ticket=0).model_dump(mode="json")
        with anyio.move_on_at(self._deadline):
            grant = await desk.acquire(
                params.endpoint, owner=self._owner, task_id=self._task_id, tokens=params.tokens
            )
            self._held[grant.ticket] = params.endpoint
            waited_ms = round(grant.waited_s * 1000)
            if grant.blocked_by is not None:
                self._journal(
                    "intel.throttled",
                    {"endpoint": params.endpoint, "wait_ms": waited_ms, "blocked_by": grant.blocked_by},
                )
            result = control.SlotResult(ticket=grant.ticket, waited_ms=waited_ms, blocked_by=grant.blocked_by)
            return result.model_dump(mode="json")
        raise LookupError(f"no slot of endpoint {params.endpoint!r} before the deadline")

    def done(self, params: control.SlotDoneParams) -> None:
        """The request of a slot ended: release it; a provider's 429 (or 503 with Retry-After), or
        rate-limit headers saying a budget is spent, hold every task's requests to it back."""
        endpoint = self._held.pop(params.ticket, None)
        desk = self._desk
        if endpoint is None or desk is None:
            return
        if self._standing.get(endpoint) == params.ticket:
            del self._standing[endpoint]  # given back unused
        hold = backoff_hold(
            params.status,
            params.retry_after_s,
            params.rate_headers,
            now_epoch_s=time.time(),
            jitter=_JITTER.random(),
        )
        if hold is not None:
            desk.hold(endpoint, anyio.current_time() + hold.hold_s)
            fields: dict[str, JsonValue] = {
                "endpoint": endpoint,
                "status": params.status,
                "hold_ms": round(hold.hold_s * 1000),
                "source": hold.source,
            }
            self._journal("intel.backoff", fields)
        desk.release(endpoint, params.ticket, tokens_used=params.tokens_used)

    def close(self) -> None:
        """The node ended: every slot it still holds goes back. The journal callback (its node's
        listener, which holds the node) is dropped, so no cycle outlives the node."""
        held, self._held = self._held, {}
        self._standing.clear()
        self._journal = _no_journal
        self._tell = None
        if self._desk is not None:
            for ticket, endpoint in held.items():
                self._desk.release(endpoint, ticket, tokens_used=None)
