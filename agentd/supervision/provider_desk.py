"""The daemon's provider limits at work: subagents' `sup/slot` requests wait here for a slot.

One desk per supervisor (so, on Temporal, one per worker) holds a `Gate` per limited endpoint
(`agentd.supervision.provider_limits` decides). A waiter is woken when a release or a rate window
frees room; a waiter that is cancelled (its task ended) leaves the queue, and a slot handed to it
just then is given back. Standing slots are handed out while an endpoint is far from its limits,
and called back (their holders told to give back any not yet used) once a request has to wait, a
provider asks for a hold, or the limits change. What each task waits for is readable
(`throttled`) for `status`/`top`.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass

import anyio

from agentd.supervision.provider_limits import Ask, Blocker, EndpointLimits, Gate, LeaseGrant


@dataclass(frozen=True, slots=True)
class Grant:
    """A slot: its ticket (to release), how long it waited and, if it waited, what held it."""

    ticket: int
    waited_s: float
    blocked_by: Blocker | None


@dataclass(frozen=True, slots=True)
class Waiting:
    """A task's request waiting for a slot: the endpoint, since when (monotonic) and why."""

    endpoint: str
    since: float
    blocked_by: Blocker


class _Waiter:
    __slots__ = ("ask", "blocked_by", "endpoint", "granted", "since", "wake")

    def __init__(self, ask: Ask, endpoint: str, since: float) -> None:
        self.ask = ask
        self.endpoint = endpoint
        self.since = since
        self.granted = False
        # Set by a grant, or to make the waiter re-read when a window frees room.
        self.wake = anyio.Event()
        self.blocked_by: Blocker | None = None


class ProviderDesk:
    """Slots for every limited endpoint; endpoints without limits are never asked about."""

    def __init__(
        self, limits: Mapping[str, EndpointLimits], clock: Callable[[], float] = anyio.current_time
    ) -> None:
        self._gates = {name: Gate(value) for name, value in limits.items()}
        self._clock = clock
        self._tickets = itertools.count(1)
        self._waiters: dict[int, _Waiter] = {}
        # When a rate window of each gate next frees room (None: only a release does).
        self._wake_at: dict[str, float | None] = {}
        # ticket -> (endpoint, how to call it back) of each standing slot handed out and neither
        # used, given back nor called back yet.
        self._leases: dict[int, tuple[str, Callable[[int], None]]] = {}

    def configure(self, limits: Mapping[str, EndpointLimits]) -> None:
        """New limits (a reload): a known endpoint keeps its state and queue under them; one no
        longer limited lets its waiters go at once."""
        for name, value in limits.items():
            if name in self._gates:
                self._gates[name].limits = value
            else:
                self._gates[name] = Gate(value)
        for name in list(self._gates):
            if name not in limits:
                self._gates[name].limits = EndpointLimits()
            self._call_back_leases(name)
            self._pump(name)

    def limited(self, endpoint: str) -> bool:
        return endpoint in self._gates

    def gate(self, endpoint: str) -> Gate:
        return self._gates[endpoint]

    def acquire_nowait(self, endpoint: str, *, owner: int, task_id: str, tokens: int) -> Grant | None:
        """A slot of `endpoint` now, if its limits allow one and no request waits before this
        one (waiters keep their turn); None: wait for it with `acquire`."""
        gate = self._gates.get(endpoint)
        if gate is None or gate.waiting:
            return None
        ask = Ask(next(self._tickets), owner, task_id, max(tokens, 0))
        gate.ask(ask)
        if gate.admit(self._clock()).granted:  # alone in the queue: the grant is this ask's
            return Grant(ask.ticket, 0.0, None)
        gate.withdraw(ask.ticket)
        return None

    def lease(self, endpoint: str, call_back: Callable[[int], None]) -> LeaseGrant | None:
        """A standing slot of `endpoint` while it is far from its limits (None otherwise);
        `call_back(ticket)` is told, once, when its holder must give it back if still unused."""
        gate = self._gates.get(endpoint)
        if gate is None:
            return None
        grant = gate.lease(next(self._tickets), self._clock())
        if grant is not None:
            self._leases[grant.ticket] = (endpoint, call_back)
        return grant

    def start_leased(self, endpoint: str, ticket: int, tokens: int) -> None:
        """A request started under a standing slot (one called back, too: its start crossed the call)."""
        gate = self._gates.get(endpoint)
        self._leases.pop(ticket, None)
        if gate is not None:
            gate.start_leased(ticket, max(tokens, 0), self._clock())

    async def acquire(self, endpoint: str, *, owner: int, task_id: str, tokens: int) -> Grant:
        """Wait for a slot of `endpoint` (cancellable); raise `KeyError` for an unlimited one."""
        gate = self._gates[endpoint]
        now = self._clock()
        waiter = _Waiter(Ask(next(self._tickets), owner, task_id, max(tokens, 0)), endpoint, now)
        self._waiters[waiter.ask.ticket] = waiter
        gate.ask(waiter.ask)
        try:
            self._pump(endpoint)
            while not waiter.granted:
                wake_at = self._wake_at.get(endpoint)
                delay_s = math.inf if wake_at is None else max(wake_at - self._clock(), 0.0)
                with anyio.move_on_after(delay_s):
                    await waiter.wake.wait()
                waiter.wake = anyio.Event()
                if not waiter.granted:
                    self._pump(endpoint)
        except BaseException:
            if waiter.granted:
                self.release(endpoint, waiter.ask.ticket, tokens_used=0)
            else:
                gate.withdraw(waiter.ask.ticket)
                self._waiters.pop(waiter.ask.ticket, None)
                self._nudge(endpoint)  # it may have been the one keeping the window's time
            raise
        finally:
            self._waiters.pop(waiter.ask.ticket, None)
        return Grant(waiter.ask.ticket, self._clock() - waiter.since, waiter.blocked_by)

    def release(self, endpoint: str, ticket: int, *, tokens_used: int | None) -> None:
        """The request of `ticket` ended (or never will start): its slot goes to the next waiter."""
        gate = self._gates.get(endpoint)
        self._leases.pop(ticket, None)
        if gate is None or ticket not in gate.in_flight:
            return
        gate.done(ticket, tokens_used)
        self._pump(endpoint)

    def hold(self, endpoint: str, until: float) -> None:
        """Start no request to `endpoint` before `until` (monotonic), whoever asks; standing slots
        not yet used are called back, so their holders ask (and wait) too."""
        gate = self._gates.get(endpoint)
        if gate is not None:
            gate.hold(until)
            self._call_back_leases(endpoint)
            self._set_wake(endpoint, gate.hold_until)

    def all_throttled(self) -> dict[str, Waiting]:
        """`throttled` of every task that has a request held by a limit, in one pass."""
        out: dict[str, Waiting] = {}
        for w in self._waiters.values():
            if w.blocked_by is None:
                continue
            first = out.get(w.ask.task_id)
            if first is None or w.since < first.since:
                out[w.ask.task_id] = Waiting(w.endpoint, w.since, w.blocked_by)
        return out

    def throttled(self, task_id: str) -> Waiting | None:
        """The longest-waiting request of `task_id` that is held by a limit, if any."""
        held = [w for w in self._waiters.values() if w.ask.task_id == task_id and w.blocked_by is not None]
        if not held:
            return None
        first = min(held, key=lambda w: w.since)
        assert first.blocked_by is not None
        return Waiting(first.endpoint, first.since, first.blocked_by)

    def _pump(self, endpoint: str) -> None:
        admission = self._gates[endpoint].admit(self._clock())
        for ask in admission.granted:
            waiter = self._waiters[ask.ticket]
            waiter.granted = True
            waiter.wake.set()
        if admission.blocked_by is None:
            self._wake_at[endpoint] = None
            return
        # A request waits: the room idle standing slots hold is its.
        self._call_back_leases(endpoint)
        self._set_wake(endpoint, admission.wake_at)
        for waiter in self._waiters.values():
            if waiter.endpoint == endpoint and not waiter.granted and waiter.blocked_by is None:
                waiter.blocked_by = admission.blocked_by

    def _call_back_leases(self, endpoint: str) -> None:
        unused = [ticket for ticket, (name, _) in self._leases.items() if name == endpoint]
        for ticket in unused:
            _, call_back = self._leases.pop(ticket)
            call_back(ticket)

    def _set_wake(self, endpoint: str, wake_at: float | None) -> None:
        """Record when `endpoint`'s window frees room, and wake a waiter to keep that time unless
        one already sleeps until an earlier one. A known time that has passed keeps no one: the
        waiter that woke for it may just have been granted its slot, leaving the others asleep
        until a release that may never come."""
        previous = self._wake_at.get(endpoint)
        self._wake_at[endpoint] = wake_at
        if wake_at is None:
            return
        if previous is not None and self._clock() < previous <= wake_at:
            return  # a waiter sleeps until an earlier time still to come, and re-reads then
        self._nudge(endpoint)

    def _nudge(self, endpoint: str) -> None:
        """Wake one waiter of `endpoint` to re-read the wake time (waiters sleep until it)."""
        if self._wake_at.get(endpoint) is None:
            return
        for waiter in self._waiters.values():
            if waiter.endpoint == endpoint and not waiter.granted:
                waiter.wake.set()
                return
