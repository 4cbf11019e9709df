"""Per-uid caps on what one user may have waiting in the journal (DESIGN §14): pure.

A local user may submit, but not so much that the daemon's disk or another user's queue pays for
it. Only unfinished tasks count, so every cap clears as that user's work completes.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class Quota:
    """None: no cap. Set from `[daemon] max_queued_per_uid` / `max_pending_bytes_per_uid`."""

    max_queued: int | None = None
    # Bytes of specs (instructions, schemas, seeds) of the uid's queued, starting and running tasks.
    max_pending_bytes: int | None = None


def quota_problem(quota: Quota, *, queued: int, pending_bytes: int, spec_bytes: int) -> str | None:
    """Why one more task of `spec_bytes` would break `quota`, naming the cap and the value, or None."""
    if quota.max_queued is not None and queued >= quota.max_queued:
        return (
            f"you have {queued} queued tasks, the cap (daemon.max_queued_per_uid = {quota.max_queued}); "
            "retry once some have started"
        )
    if quota.max_pending_bytes is not None and pending_bytes + spec_bytes > quota.max_pending_bytes:
        return (
            f"your unfinished tasks hold {pending_bytes} bytes of specs and this one {spec_bytes}, over "
            f"the cap (daemon.max_pending_bytes_per_uid = {quota.max_pending_bytes}); retry once some "
            "have finished"
        )
    return None
