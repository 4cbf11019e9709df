"""How long a provider's answer holds back every request to its endpoint (pure).

A 429, or a 503 that names a `Retry-After`, holds the endpoint for that wait plus jitter, so the
held requests do not all come back in the same instant. A reply's rate-limit headers
(`x-ratelimit-remaining-*` / `x-ratelimit-reset-*`, `anthropic-ratelimit-*-remaining` /
`-reset`) that say a budget is spent hold it until the budget's reset. No clock reads: wall time
(`now_epoch_s`, for Anthropic's reset instants) and the jitter draw are arguments.
"""

from __future__ import annotations

import datetime
import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Literal

# A 429 without Retry-After still holds the endpoint this long: the provider said "too many".
DEFAULT_429_HOLD_S = 1.0
# The jitter added to a hold: up to this share of it (and at least `MIN_JITTER_S` of spread).
JITTER_SHARE = 0.2
MIN_JITTER_S = 0.05
# A hostile or broken header cannot park an endpoint for longer than this.
MAX_HOLD_S = 300.0
_BUDGETS = ("requests", "tokens", "input-tokens", "output-tokens")


@dataclass(frozen=True, slots=True)
class Hold:
    """Hold the endpoint `hold_s` from now; `source` says why (`retry_after` or `headers`)."""

    hold_s: float
    source: Literal["retry_after", "headers"]


def backoff_hold(
    status: int | None,
    retry_after_s: float | None,
    rate_headers: Mapping[str, str],
    *,
    now_epoch_s: float,
    jitter: float,
) -> Hold | None:
    """The hold a request's end asks for, or None. `jitter` is a draw in [0, 1)."""
    if status == 429 or (status == 503 and retry_after_s is not None):
        base = retry_after_s if retry_after_s is not None else DEFAULT_429_HOLD_S
        return Hold(_jittered(base, jitter), "retry_after")
    spent = header_reset_s(rate_headers, now_epoch_s=now_epoch_s)
    if spent is not None:
        return Hold(_jittered(spent, jitter), "headers")
    return None


def _jittered(base_s: float, jitter: float) -> float:
    base_s = min(max(base_s, 0.0), MAX_HOLD_S)
    return base_s + max(base_s * JITTER_SHARE, MIN_JITTER_S) * min(max(jitter, 0.0), 1.0)


def header_reset_s(headers: Mapping[str, str], *, now_epoch_s: float) -> float | None:
    """Seconds until the latest reset among the budgets the headers say are spent (remaining 0)."""
    lowered = {name.lower(): value.strip() for name, value in headers.items()}
    waits = []
    for budget in _BUDGETS:
        openai = (f"x-ratelimit-remaining-{budget}", f"x-ratelimit-reset-{budget}")
        anthropic = (f"anthropic-ratelimit-{budget}-remaining", f"anthropic-ratelimit-{budget}-reset")
        for remaining_name, reset_name in (openai, anthropic):
            if lowered.get(remaining_name) != "0" or reset_name not in lowered:
                continue
            wait = _reset_s(lowered[reset_name], now_epoch_s)
            if wait is not None:
                waits.append(wait)
    return max(waits) if waits else None


def _reset_s(value: str, now_epoch_s: float) -> float | None:
    """OpenAI's duration (`1s`, `6m0s`, `20ms`, `1h2m3.5s`) or Anthropic's RFC 3339 instant."""
    duration = parse_duration_s(value)
    if duration is not None:
        return duration
    try:
        when = datetime.datetime.fromisoformat(value)
    except ValueError:
        return None
    if when.tzinfo is None:
        return None
    return max(when.timestamp() - now_epoch_s, 0.0)


_UNITS_S = {"h": 3600.0, "m": 60.0, "s": 1.0, "ms": 0.001}


def parse_duration_s(text: str) -> float | None:
    """A Go-style duration of h/m/s/ms parts in seconds; None when `text` is not one."""
    total = 0.0
    number = ""
    index = 0
    parts = 0
    while index < len(text):
        char = text[index]
        if char.isdigit() or char == ".":
            number += char
            index += 1
            continue
        unit = "ms" if text.startswith("ms", index) else char
        if unit not in _UNITS_S or not number:
            return None
        try:
            total += float(number) * _UNITS_S[unit]
        except ValueError:
            return None
        number = ""
        index += len(unit)
        parts += 1
    if number or parts == 0 or not math.isfinite(total):
        return None
    return total
