"""A per-endpoint circuit breaker as pure, frozen state (docs/design.md §5).

Three consecutive failed calls open the breaker for a cooldown; after it the breaker is
half-open and the next call is its trial: success closes it, failure re-opens it for another
cooldown. Time is passed in (`now`, a monotonic instant), so every transition is testable.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Literal

BreakerState = Literal["closed", "open", "half_open"]

FAILURE_THRESHOLD = 3
COOLDOWN_S = 30.0


@dataclass(frozen=True, slots=True)
class Breaker:
    threshold: int = FAILURE_THRESHOLD
    cooldown_s: float = COOLDOWN_S
    consecutive_failures: int = 0
    # Invariant: set exactly when consecutive_failures >= threshold; the instant it (re)opened.
    opened_at: float | None = None


def breaker_state(breaker: Breaker, now: float) -> BreakerState:
    """Where the breaker stands at `now`."""
    if breaker.opened_at is None:
        return "closed"
    if now - breaker.opened_at < breaker.cooldown_s:
        return "open"
    return "half_open"


def breaker_allows(breaker: Breaker, now: float) -> bool:
    """Whether a call may be sent to this endpoint at `now` (closed, or half-open for a trial)."""
    return breaker_state(breaker, now) != "open"


def breaker_after_success(breaker: Breaker) -> Breaker:
    """A success closes the breaker and forgets past failures."""
    return replace(breaker, consecutive_failures=0, opened_at=None)


def breaker_after_failure(breaker: Breaker, now: float) -> Breaker:
    """Count a failed call; reaching the threshold, or failing a half-open trial, (re)opens it."""
    failures = breaker.consecutive_failures + 1
    opened_at = now if failures >= breaker.threshold else None
    return replace(breaker, consecutive_failures=failures, opened_at=opened_at)


def reopens_in_s(breaker: Breaker, now: float) -> float:
    """Seconds until an open breaker goes half-open (0 when it is not open)."""
    if breaker.opened_at is None:
        return 0.0
    return max(0.0, breaker.opened_at + breaker.cooldown_s - now)
