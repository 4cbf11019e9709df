"""A provider's rate-limit headers, caught as each response arrives, for the supervisor's limiter.

The HTTP client's response hook hands every response's headers here; only those of a request made
inside `capturing()` are kept (a context variable: the hook runs in the request's own task), and
only the rate-limit ones, bounded. The supervisor reads them (docs/budgets.md).
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from contextvars import ContextVar

PREFIXES = ("x-ratelimit-", "anthropic-ratelimit-")
MAX_HEADERS = 32
_CAUGHT: ContextVar[dict[str, str] | None] = ContextVar("rate_headers", default=None)


@contextmanager
def capturing() -> Iterator[dict[str, str]]:
    """The rate-limit headers of the responses to requests made inside the block."""
    caught: dict[str, str] = {}
    token = _CAUGHT.set(caught)
    try:
        yield caught
    finally:
        _CAUGHT.reset(token)


def catch(headers: Iterable[tuple[str, str]]) -> None:
    """Keep the rate-limit headers of one response, when a `capturing()` block asks for them."""
    caught = _CAUGHT.get()
    if caught is None:
        return
    for name, value in headers:
        lowered = name.lower()
        if lowered.startswith(PREFIXES) and len(caught) < MAX_HEADERS:
            caught[lowered[:64]] = value[:128]
