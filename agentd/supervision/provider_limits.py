"""Provider limits as decisions (pure): which waiting model requests to one endpoint may start now.

One `Gate` per configured endpoint holds what the daemon knows of it — requests in flight, the
starts and tokens of the last `WINDOW_S`, a shared backoff, the standing slots handed out — and the
requests waiting for a slot, taken round-robin across owners and, within an owner, across tasks (as
the task queue is), so one busy task cannot starve another. No I/O and no clock reads: `now` is an
argument; the desk (`agentd.supervision.provider_desk`) drives it.
"""

from __future__ import annotations

import collections
from dataclasses import dataclass
from typing import Literal

# The provider's window is a minute of arrivals; the gate counts a start when it grants it, and
# the request arrives later (the child's wake-up, the connection, a loaded machine). Holding each
# start for a little longer than the minute keeps the gate's minute inside the provider's, at a cost
# of at most 1/31 of the allowed rate.
WINDOW_S = 60.0 + 2.0

# A standing slot (docs/budgets.md, "Standing slots") is handed out only while the endpoint, with
# it, stays within this share of each limit: far from the limits a request need not wait for a
# round trip to the supervisor; near them every request asks, and waits its round-robin turn.
LEASE_SHARE = 0.5
# On an endpoint with `tokens_per_minute`, a standing slot starts a request of at most this share
# of it (a larger request asks for its slot; its own duration dwarfs the round trip).
LEASE_TOKENS_SHARE = 0.125

Blocker = Literal["max_concurrent_requests", "requests_per_minute", "tokens_per_minute", "backoff"]


@dataclass(frozen=True, slots=True)
class EndpointLimits:
    """`[intelligence.NAME]`'s provider limits; None bounds nothing."""

    max_concurrent: int | None = None
    requests_per_minute: int | None = None
    tokens_per_minute: int | None = None


@dataclass(frozen=True, slots=True)
class Ask:
    """One request waiting for a slot: whose it is and the tokens it may use (its estimate)."""

    ticket: int
    owner: int
    task_id: str
    tokens: int


@dataclass(frozen=True, slots=True)
class Admission:
    """What `Gate.admit` decided: the asks that start now, and — when some still wait — what holds
    them and when a window frees room (`wake_at`; None: only a release frees it)."""

    granted: tuple[Ask, ...]
    blocked_by: Blocker | None = None
    wake_at: float | None = None


@dataclass(frozen=True, slots=True)
class LeaseGrant:
    """A standing slot: its ticket and the largest request it may start (None: any size)."""

    ticket: int
    tokens: int | None


class _RoundRobin:
    """Waiting asks by owner, then by task; `pop` takes from the next owner's next task."""

    def __init__(self) -> None:
        # Invariant: no owner maps to an empty dict, no task to an empty deque.
        self._owners: dict[int, dict[str, collections.deque[Ask]]] = {}

    def __len__(self) -> int:
        return sum(len(asks) for tasks in self._owners.values() for asks in tasks.values())

    def push(self, ask: Ask) -> None:
        tasks = self._owners.setdefault(ask.owner, {})
        tasks.setdefault(ask.task_id, collections.deque()).append(ask)

    def peek(self) -> Ask | None:
        for tasks in self._owners.values():
            for asks in tasks.values():
                return asks[0]
        return None

    def pop(self) -> Ask:
        """The head ask; its task then goes to the back of its owner's tasks, its owner to the back."""
        owner, tasks = next(iter(self._owners.items()))
        task_id, asks = next(iter(tasks.items()))
        ask = asks.popleft()
        del tasks[task_id]
        if asks:
            tasks[task_id] = asks
        del self._owners[owner]
        if tasks:
            self._owners[owner] = tasks
        return ask

    def remove(self, ticket: int) -> bool:
        for owner, tasks in self._owners.items():
            for task_id, asks in tasks.items():
                for ask in asks:
                    if ask.ticket == ticket:
                        asks.remove(ask)
                        if not asks:
                            del tasks[task_id]
                        if not tasks:
                            del self._owners[owner]
                        return True
        return False


class Gate:
    """One endpoint's limits, state and queue."""

    def __init__(self, limits: EndpointLimits) -> None:
        self.limits = limits
        # ticket -> its token entry in `_tokens` (updated with the reply's usage on `done`).
        # Invariant: a standing slot is in flight from the moment it is handed out, so the
        # concurrency limit counts it whether or not its request has started.
        self.in_flight: dict[int, list[float]] = {}
        # ticket -> tokens reserved, of each standing slot whose request has not started: it counts
        # as a start (and its tokens) in the window until it starts (then from that instant) or is
        # given back, so the windows hold whenever a child uses it.
        self.leased: dict[int, float] = {}
        self._starts: collections.deque[float] = collections.deque()
        # [start time, tokens] of each request started in the window, oldest first.
        self._tokens: collections.deque[list[float]] = collections.deque()
        self._queue = _RoundRobin()
        # No request starts before this instant (a 429's Retry-After, or a drained header budget).
        self.hold_until = 0.0

    @property
    def waiting(self) -> int:
        return len(self._queue)

    def ask(self, ask: Ask) -> None:
        self._queue.push(ask)

    def withdraw(self, ticket: int) -> bool:
        """Remove a waiting ask (its caller gave up); False when it is not waiting."""
        return self._queue.remove(ticket)

    def admit(self, now: float) -> Admission:
        """Start as many waiting asks as the limits allow, in round-robin order."""
        self._prune(now)
        granted: list[Ask] = []
        while (head := self._queue.peek()) is not None:
            blocked_by, wake_at = self._blocked(head, now)
            if blocked_by is not None:
                return Admission(tuple(granted), blocked_by, wake_at)
            ask = self._queue.pop()
            entry = [now, float(ask.tokens)]
            self.in_flight[ask.ticket] = entry
            self._starts.append(now)
            self._tokens.append(entry)
            granted.append(ask)
        return Admission(tuple(granted))

    def lease(self, ticket: int, now: float) -> LeaseGrant | None:
        """Hand out a standing slot when nothing waits, nothing holds the endpoint back and, with
        it, the endpoint stays within `LEASE_SHARE` of each limit; None otherwise."""
        self._prune(now)
        limits = self.limits
        if self.waiting or now < self.hold_until:
            return None
        in_flight = len(self.in_flight) + 1
        if limits.max_concurrent is not None and in_flight > limits.max_concurrent * LEASE_SHARE:
            return None
        starts = len(self._starts) + len(self.leased) + 1
        if limits.requests_per_minute is not None and starts > limits.requests_per_minute * LEASE_SHARE:
            return None
        tokens: int | None = None
        if limits.tokens_per_minute is not None:
            tokens = max(int(limits.tokens_per_minute * LEASE_TOKENS_SHARE), 1)
            if self._tokens_counted() + tokens > limits.tokens_per_minute * LEASE_SHARE:
                return None
        self.in_flight[ticket] = [now, 0.0]
        self.leased[ticket] = float(tokens or 0)
        return LeaseGrant(ticket, tokens)

    def start_leased(self, ticket: int, tokens: int, now: float) -> bool:
        """The request of a standing slot started (its start is counted from `now`, when the
        supervisor hears of it: no earlier than the request left, so the window ends no sooner
        than the provider's); False when the slot is not one handed out and unused."""
        if self.leased.pop(ticket, None) is None:
            return False
        entry = self.in_flight[ticket]
        entry[0], entry[1] = now, float(tokens)
        self._starts.append(now)
        self._tokens.append(entry)
        return True

    def done(self, ticket: int, tokens_used: int | None) -> None:
        """A started request ended, or a standing slot came back unused; `tokens_used` (from its
        usage) replaces its estimate."""
        entry = self.in_flight.pop(ticket, None)
        if self.leased.pop(ticket, None) is not None:
            return
        if entry is not None and tokens_used is not None:
            entry[1] = float(tokens_used)

    def hold(self, until: float) -> None:
        """Start nothing before `until` (never shortens a hold already set)."""
        self.hold_until = max(self.hold_until, until)

    def _blocked(self, ask: Ask, now: float) -> tuple[Blocker | None, float | None]:
        limits = self.limits
        if now < self.hold_until:
            return "backoff", self.hold_until
        if limits.max_concurrent is not None and len(self.in_flight) >= limits.max_concurrent:
            return "max_concurrent_requests", None
        # A standing slot not yet used frees its room only when it comes back: no window time.
        starts = len(self._starts) + len(self.leased)
        if limits.requests_per_minute is not None and starts >= limits.requests_per_minute:
            return "requests_per_minute", self._starts[0] + WINDOW_S if self._starts else None
        if self._over_tokens(ask):
            return "tokens_per_minute", self._tokens[0][0] + WINDOW_S if self._tokens else None
        return None, None

    def _over_tokens(self, ask: Ask) -> bool:
        per_minute = self.limits.tokens_per_minute
        if per_minute is None or not (self._tokens or self.leased):
            return False  # an ask larger than the whole budget still starts once the window is empty
        return self._tokens_counted() + ask.tokens > per_minute

    def _tokens_counted(self) -> float:
        return sum(entry[1] for entry in self._tokens) + sum(self.leased.values())

    def _prune(self, now: float) -> None:
        horizon = now - WINDOW_S
        while self._starts and self._starts[0] <= horizon:
            self._starts.popleft()
        while self._tokens and self._tokens[0][0] <= horizon:
            self._tokens.popleft()
