"""What a model call costs (pure): an endpoint's price per million tokens applied to its usage.

Amounts are integer micro-USD, so sums and reservations are exact. A price in USD per million
tokens is, conveniently, micro-USD per token. A reply that reported no usage is counted at the
most it could have cost — its input estimate plus its whole output allowance at the output
price — so an unmetered provider can never spend past a budget unseen (docs/budgets.md).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

MICROS_PER_USD = 1_000_000
# The cost grant of a tree without a cost budget: larger than anything it could spend.
UNBOUNDED_MICROS = 10**18


@dataclass(frozen=True, slots=True)
class Price:
    """`[intelligence.NAME] price`, in USD per million tokens (= micro-USD per token), and the
    most one reply may hold (`max_output_tokens`, else the context window)."""

    input: float
    output: float
    cached_input: float
    max_reply_tokens: int

    @property
    def highest(self) -> float:
        """The dearest token of this endpoint (what a token grant may cost at most)."""
        return max(self.input, self.output, self.cached_input)


@dataclass(frozen=True, slots=True)
class CallCost:
    """One call's cost and whether it is the counted-at-maximum figure of an unmetered reply."""

    micros: int
    at_maximum: bool = False


def call_cost(
    price: Price, *, tokens_in: int, tokens_out: int, cached_in: int = 0, reported: bool = True
) -> CallCost:
    """The cost of one call's usage; an unreported one at its maximum (`tokens_in` is then the
    estimate of its request)."""
    if not reported:
        micros = tokens_in * price.input + price.max_reply_tokens * price.output
        return CallCost(math.ceil(micros), at_maximum=True)
    cached = min(max(cached_in, 0), tokens_in)
    micros = (tokens_in - cached) * price.input + cached * price.cached_input + tokens_out * price.output
    return CallCost(math.ceil(micros))


def to_micros(usd: float) -> int:
    return math.floor(usd * MICROS_PER_USD)


def to_usd(micros: int) -> float:
    return round(micros / MICROS_PER_USD, 6)


def usd_text(micros: int) -> str:
    """`$2.5012` — four decimals, enough to tell a cent's fraction."""
    return f"${micros / MICROS_PER_USD:.4f}"
