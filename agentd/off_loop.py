"""Checks of client input that can cost more than a millisecond (a cron expression's next-fire
search, an output schema's validation) run here: in a worker thread, one at a time, under a time
bound, so no request can hold the event loop that serves every other client (docs/security.md).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TypeVar

import anyio
from anyio.lowlevel import RunVar

from agentd.errors import AgentdError

T = TypeVar("T")

# One check at a time (per event loop): a burst of expensive requests queues here instead of
# taking the GIL from the event loop in parallel.
_LIMITER: RunVar[anyio.CapacityLimiter] = RunVar("agentd_check_limiter")
# Every check is bounded by its own iteration limits far below this; the bound only makes sure a
# client is answered, whatever a library does with a pathological input.
CHECK_TIMEOUT_S = 2.0


class CheckTimedOut(AgentdError):
    """A client-input check did not finish within `CHECK_TIMEOUT_S`."""


async def run_check(check: Callable[[], T]) -> T:
    """`check()` in the checks' worker thread; raises `CheckTimedOut` past the bound (the thread
    is left to finish on its own; its result is dropped)."""
    try:
        limiter = _LIMITER.get()
    except LookupError:
        limiter = anyio.CapacityLimiter(1)
        _LIMITER.set(limiter)
    # Each check waits its turn first (every check ahead of it is bounded), then gets its bound.
    async with limiter:
        with anyio.move_on_after(CHECK_TIMEOUT_S):
            return await anyio.to_thread.run_sync(check, abandon_on_cancel=True)
    raise CheckTimedOut(f"the check did not finish within {CHECK_TIMEOUT_S:g} s")
