"""Pure decisions of reactive triggers (docs/design.md §11): who owns a URI, when a delivery is due, what
`max_inflight` and `overflow` let start, and when a dead watcher is restarted or given up on.

No I/O and no clock reads: `now` is an argument (monotonic seconds), randomness is injected.
"""

from __future__ import annotations

import collections
import random
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Literal

from protocol.watch import QUOTED_NOTE, glob_matches, literal_prefix, quoted_data

Overflow = Literal["coalesce", "drop_oldest", "drop_newest"]
OnArm = Literal["deliver", "skip"]
# How many deliveries one trigger holds back at most under `coalesce` (one per URI): the watcher
# subscribes at most this many URIs (protocol.watch.MAX_WATCHED_URIS), so only a flood of
# distinct URIs from a misbehaving server reaches it; past it the oldest waiting one is dropped.
MAX_COALESCED = 10_000


@dataclass(frozen=True, slots=True)
class Target:
    """One trigger's interest on its server, in declaration order (`index`)."""

    trigger: str
    index: int
    uri: str | None = None
    glob: str | None = None


def owner(uri: str, targets: Sequence[Target]) -> str | None:
    """The one trigger that owns `uri`: an exact URI beats any glob; among globs the longest
    literal prefix wins, then the earliest declared. None: no trigger watches it."""
    exact = [t for t in targets if t.uri == uri]
    if exact:
        return min(exact, key=lambda t: t.index).trigger
    globs = [t for t in targets if t.glob is not None and glob_matches(t.glob, uri)]
    if not globs:
        return None
    best = min(globs, key=lambda t: (-len(literal_prefix(t.glob or "")), t.index))
    return best.trigger


# ---- debounce ------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Delivery:
    """What a trigger's task is told: the URI and the newest etag (notify, then read)."""

    uri: str
    etag: str | None
    synthetic: bool = False


@dataclass(slots=True)
class _Held:
    first_at: float
    last_at: float
    delivery: Delivery


class Debouncer:
    """Trailing debounce per URI: a change is delivered `debounce_s` after the last change of its
    URI, but no later than `max_wait_s` after the first one it coalesced; newest wins (its etag)."""

    def __init__(self, debounce_s: float, max_wait_s: float) -> None:
        self.debounce_s = debounce_s
        self.max_wait_s = max(max_wait_s, debounce_s)
        self._held: dict[str, _Held] = {}

    def __len__(self) -> int:
        return len(self._held)

    def offer(self, delivery: Delivery, now: float) -> bool:
        """Hold `delivery`; True when its URI was not held yet (the only case that can make a
        delivery due sooner than before: a held URI's due time only moves later)."""
        held = self._held.get(delivery.uri)
        if held is None:
            self._held[delivery.uri] = _Held(now, now, delivery)
            return True
        held.last_at = now
        # A real change outranks a synthetic "possibly changed": it is the same delivery, but
        # the etag (if any) is a real one.
        synthetic = held.delivery.synthetic and delivery.synthetic
        held.delivery = Delivery(delivery.uri, delivery.etag, synthetic)
        return False

    def _due_at(self, held: _Held) -> float:
        return min(held.last_at + self.debounce_s, held.first_at + self.max_wait_s)

    def next_due(self) -> float | None:
        return min((self._due_at(h) for h in self._held.values()), default=None)

    def take_due(self, now: float) -> list[Delivery]:
        """The deliveries whose window closed by `now`, in the order they first arrived."""
        due = [uri for uri, held in self._held.items() if self._due_at(held) <= now]
        return [self._held.pop(uri).delivery for uri in due]

    def clear(self) -> None:
        self._held.clear()


# ---- max_inflight and overflow -------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Admission:
    """What to do with a due delivery: start these now (journal them as tasks), drop those."""

    start: tuple[Delivery, ...] = ()
    dropped: tuple[Delivery, ...] = ()


class Gate:
    """At most `max_inflight` unfinished tasks per trigger; what comes beyond waits or is dropped.

    `coalesce`: one waiting delivery per URI (newest wins), started as tasks end. `drop_oldest`:
    up to `max_inflight` wait in arrival order; a new one pushes the oldest waiting out.
    `drop_newest`: up to `max_inflight` wait; a new one beyond that is dropped.
    """

    def __init__(self, max_inflight: int, overflow: Overflow) -> None:
        self.max_inflight = max_inflight
        self.overflow = overflow
        self.inflight = 0
        self._waiting: collections.OrderedDict[str, Delivery] = collections.OrderedDict()
        self._fifo: collections.deque[Delivery] = collections.deque()

    @property
    def waiting(self) -> int:
        return len(self._waiting) + len(self._fifo)

    def _bound(self) -> int:
        return MAX_COALESCED if self.overflow == "coalesce" else self.max_inflight

    def offer(self, delivery: Delivery) -> Admission:
        """A debounced delivery is due. The caller journals `start` and then calls `started`."""
        if self.inflight < self.max_inflight and self.waiting == 0:
            return Admission(start=(delivery,))
        if self.overflow == "coalesce":
            if delivery.uri in self._waiting:
                self._waiting[delivery.uri] = delivery
                return Admission()
            dropped: tuple[Delivery, ...] = ()
            if len(self._waiting) >= self._bound():
                dropped = (self._waiting.popitem(last=False)[1],)
            self._waiting[delivery.uri] = delivery
            return Admission(dropped=dropped)
        if len(self._fifo) < self._bound():
            self._fifo.append(delivery)
            return Admission()
        if self.overflow == "drop_newest":
            return Admission(dropped=(delivery,))
        oldest = self._fifo.popleft()
        self._fifo.append(delivery)
        return Admission(dropped=(oldest,))

    def started(self, count: int = 1) -> None:
        self.inflight += count

    def ended(self, count: int = 1) -> None:
        self.inflight = max(0, self.inflight - count)

    def take_ready(self) -> list[Delivery]:
        """Waiting deliveries that may start now (slots are free), oldest first."""
        out: list[Delivery] = []
        while self.inflight + len(out) < self.max_inflight:
            if self._waiting:
                out.append(self._waiting.popitem(last=False)[1])
            elif self._fifo:
                out.append(self._fifo.popleft())
            else:
                break
        return out

    def clear(self) -> list[Delivery]:
        dropped = [*self._waiting.values(), *self._fifo]
        self._waiting.clear()
        self._fifo.clear()
        return dropped


# ---- the restart governor ------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class GovernorPolicy:
    """Exponential backoff with jitter between restarts; more than `max_restarts` restarts within
    `window_s` and the watcher is `failed` until a reload or `agentd triggers restart`."""

    backoff_initial_s: float = 1.0
    backoff_max_s: float = 60.0
    max_restarts: int = 5
    window_s: float = 300.0
    # The fraction of each delay drawn at random (0.2: the delay is 80–100% of the nominal one),
    # so watchers of a flapping server do not restart in lockstep.
    jitter: float = 0.2


@dataclass(frozen=True, slots=True)
class RestartDecision:
    """After an exit: restart after `delay_s`, or give up (`failed`)."""

    failed: bool
    delay_s: float = 0.0
    restarts_in_window: int = 0


@dataclass
class Governor:
    policy: GovernorPolicy
    rand: Callable[[], float] = field(default=random.random)
    _restarts: collections.deque[float] = field(default_factory=collections.deque)

    def on_exit(self, now: float) -> RestartDecision:
        """The watcher died (not `unsupported`, not stopped by us): restart or give up."""
        window = self.policy.window_s
        while self._restarts and self._restarts[0] <= now - window:
            self._restarts.popleft()
        if len(self._restarts) >= self.policy.max_restarts:
            return RestartDecision(failed=True, restarts_in_window=len(self._restarts))
        nominal = min(self.policy.backoff_initial_s * (2 ** len(self._restarts)), self.policy.backoff_max_s)
        delay = nominal * (1.0 - self.policy.jitter * self.rand())
        self._restarts.append(now)
        return RestartDecision(failed=False, delay_s=delay, restarts_in_window=len(self._restarts))

    def reset(self) -> None:
        """A reload or an operator's restart: the count starts again."""
        self._restarts.clear()


# ---- the task a delivery runs --------------------------------------------------------------


def render_instruction(template: str, *, uri: str, server: str, etag: str | None) -> str:
    """The trigger's instruction with {uri}, {server} and {etag} filled ({{ and }} are braces).
    The config check accepted the template, so only these fields occur. The URI and the etag are
    the watched server's (anyone who can create a resource there chooses them): they go in as
    quoted data, followed by a note saying so, never as text the model could take for orders."""
    text = template.format(uri=quoted_data(uri), server=server, etag=quoted_data(etag) if etag else "")
    return f"{text}\n\n{QUOTED_NOTE}"
