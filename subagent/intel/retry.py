"""The transport retry plan (pure): how long to wait before retry N, and whether one remains.

Backoff starts at `backoff_initial_s`, doubles up to `backoff_max_s`, and is jittered into the
upper half of that step so a fleet of subagents does not retry in lockstep. A server's
`Retry-After` is a lower bound on the wait, capped so a hostile value cannot park a run.
A stall (the endpoint went silent past a timeout) is retried at most `stall_retries` times, and
no retry starts when its backoff would reach the run's deadline. The effectful side (the
failover driver) only sleeps for what this module returns.
"""

from __future__ import annotations

import math
import random
from dataclasses import dataclass
from email.utils import parsedate_to_datetime

from protocol.spawn import LoopKnobs

RETRY_AFTER_CAP_S = 60.0
# A stalled attempt already waited a whole timeout; one more try covers a dropped connection,
# a second silence means the server is wedged (and four would quadruple the wait).
STALL_RETRIES = 1


@dataclass(frozen=True, slots=True)
class RetryPolicy:
    """How many retries follow the first attempt, and the backoff envelope."""

    retries: int
    initial_s: float
    max_s: float
    retry_after_cap_s: float = RETRY_AFTER_CAP_S
    stall_retries: int = STALL_RETRIES

    @classmethod
    def from_knobs(cls, knobs: LoopKnobs) -> RetryPolicy:
        return cls(
            retries=knobs.transport_retries,
            initial_s=knobs.backoff_initial_s,
            max_s=max(knobs.backoff_max_s, knobs.backoff_initial_s),
        )


def backoff_step_s(policy: RetryPolicy, retry_index: int) -> float:
    """The un-jittered backoff before retry `retry_index` (0 = the first retry)."""
    # Cap the exponent: 2**1000 would overflow a float long before it is clamped.
    return min(policy.initial_s * 2.0 ** min(retry_index, 60), policy.max_s)


def retry_delay_s(
    policy: RetryPolicy,
    retry_index: int,
    *,
    rng: random.Random,
    retry_after_s: float | None = None,
    stalls: int = 0,
    remaining_s: float = math.inf,
) -> float | None:
    """Seconds to wait before retry `retry_index`, or None when no retry should follow.

    The jittered backoff lies in `[step / 2, step]`; a server's `Retry-After` raises it to at
    least `min(retry_after_s, retry_after_cap_s)`. None when the retries are spent, when
    `stalls` (stalled attempts so far) exceeds `stall_retries`, or when the wait would not end
    before the deadline `remaining_s` away.
    """
    if retry_index >= policy.retries or stalls > policy.stall_retries:
        return None
    step = backoff_step_s(policy, retry_index)
    delay = step / 2 + rng.uniform(0.0, step / 2)
    if retry_after_s is not None and retry_after_s > 0:
        delay = max(delay, min(retry_after_s, policy.retry_after_cap_s))
    if delay >= remaining_s:
        return None
    return delay


def parse_retry_after(value: str | None, *, now_epoch_s: float) -> float | None:
    """Seconds a `Retry-After` header asks for (delta-seconds or HTTP-date), None if unusable.

    `now_epoch_s` is wall-clock time, needed only to turn an HTTP-date into a delta.
    """
    if value is None:
        return None
    text = value.strip()
    if not text:
        return None
    try:
        seconds = float(text)
    except ValueError:
        try:
            when = parsedate_to_datetime(text)
        except (TypeError, ValueError, IndexError):
            return None
        if when.tzinfo is None:
            return None
        seconds = when.timestamp() - now_epoch_s
    if not math.isfinite(seconds):
        return None
    # A date in the past means "now": retry without an extra wait.
    return max(seconds, 0.0)


def parse_retry_after_ms(value: str | None) -> float | None:
    """Seconds from OpenAI's non-standard `retry-after-ms` header, None if absent or unusable."""
    if value is None:
        return None
    try:
        millis = float(value.strip())
    except ValueError:
        return None
    if not math.isfinite(millis) or millis < 0:
        return None
    return millis / 1000.0
