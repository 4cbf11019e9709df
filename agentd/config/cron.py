"""Cron expressions and time zones as operators write them: checked once, for the config loader,
the API and the CLI alike, so each reports the same problem in the same words.

Cron is the standard 5-field syntax, parsed by `cronsim` (the evaluator of healthchecks.io, which
follows Debian cron; docs/decisions.md says why); zones are IANA names from `zoneinfo`.
"""

from __future__ import annotations

from datetime import datetime
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from cronsim import CronSim, CronSimError


def cron_problem(expr: str) -> str | None:
    """What is wrong with a 5-field cron expression, or None."""
    if len(expr.split()) != 5:
        return f"{expr!r} is not a 5-field cron expression (minute hour day-of-month month day-of-week)"
    try:
        CronSim(expr, datetime(2000, 1, 1))
    except CronSimError as exc:
        return f"{expr!r}: {str(exc).lower()}"
    return None


def load_zone(name: str) -> ZoneInfo | None:
    """The IANA zone `name`, or None if there is no such zone."""
    try:
        return ZoneInfo(name)
    except (ZoneInfoNotFoundError, ValueError):
        return None


def zone_problem(name: str) -> str | None:
    if load_zone(name) is None:
        return f"unknown time zone {name!r} (use an IANA name such as Europe/Berlin)"
    return None
