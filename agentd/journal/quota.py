"""Per-uid caps on what one user may have waiting in the journal (docs/design.md §14): pure.

A local user may submit, but not so much that the daemon's disk or another user's queue pays for
it. Unfinished tasks count, so those caps clear as that user's work completes; schedules count
until they are deleted (an ended one still holds its spec in the journal).
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class Quota:
    """None: no cap. Set from `[daemon] max_queued_per_uid`, `max_pending_bytes_per_uid`,
    `max_schedules_per_uid` and `max_fires_per_minute_per_uid`."""

    max_queued: int | None = None
    # Bytes of specs (instructions, schemas, seeds) of the uid's queued, starting and running tasks
    # and of its schedules.
    max_pending_bytes: int | None = None
    max_schedules: int | None = None
    max_fires_per_minute: int | None = None


def quota_problem(quota: Quota, *, queued: int, pending_bytes: int, spec_bytes: int) -> str | None:
    """Why one more task of `spec_bytes` would break `quota`, naming the cap and the value, or None."""
    if quota.max_queued is not None and queued >= quota.max_queued:
        return (
            f"you have {queued} queued tasks, the cap (daemon.max_queued_per_uid = {quota.max_queued}); "
            "retry once some have started"
        )
    return _bytes_problem(quota, pending_bytes, spec_bytes, "this one")


def schedule_quota_problem(
    quota: Quota, *, schedules: int, pending_bytes: int, spec_bytes: int
) -> str | None:
    """Why one more schedule of `spec_bytes` would break `quota`, naming the cap, or None."""
    cap = quota.max_schedules
    if cap is not None and schedules >= cap:
        return (
            f"you have {schedules} schedules, the cap (daemon.max_schedules_per_uid = {cap}); "
            "delete some (agentd schedules delete ID) first"
        )
    return _bytes_problem(quota, pending_bytes, spec_bytes, "this schedule")


def _bytes_problem(quota: Quota, pending_bytes: int, spec_bytes: int, this: str) -> str | None:
    if quota.max_pending_bytes is not None and pending_bytes + spec_bytes > quota.max_pending_bytes:
        return (
            f"your unfinished tasks and your schedules hold {pending_bytes} bytes of specs and {this} "
            f"{spec_bytes}, over the cap (daemon.max_pending_bytes_per_uid = {quota.max_pending_bytes}); "
            "retry once some tasks have finished or schedules are deleted"
        )
    return None
