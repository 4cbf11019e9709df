"""JSON log lines on stderr with the closed event vocabulary (DESIGN §13).

Every line has `ts` (UTC, milliseconds), `level`, `event` (a name from `protocol.events`),
`comp`, and whatever identity the caller binds (`task_id`, `run_id`, `handle`, `pid`, …).
An event name outside the vocabulary is a programming error: in strict mode (tests) it raises,
otherwise the line is kept and marked `event_unknown: true`.
"""

from __future__ import annotations

import logging
import sys
import time
from collections.abc import MutableMapping
from typing import Any, TextIO

import structlog

from protocol.events import EVENT_NAMES

LEVELS = {"debug": logging.DEBUG, "info": logging.INFO, "warning": logging.WARNING, "error": logging.ERROR}


def _timestamp(_: Any, __: str, event_dict: MutableMapping[str, Any]) -> MutableMapping[str, Any]:
    now = time.time()
    event_dict["ts"] = time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(now)) + f".{int(now % 1 * 1000):03d}Z"
    return event_dict


class _Vocabulary:
    def __init__(self, strict: bool) -> None:
        self.strict = strict

    def __call__(self, _: Any, __: str, event_dict: MutableMapping[str, Any]) -> MutableMapping[str, Any]:
        event = event_dict.get("event")
        if event not in EVENT_NAMES:
            if self.strict:
                raise ValueError(f"log event {event!r} is not in the closed vocabulary (protocol/events.py)")
            event_dict["event_unknown"] = True
        return event_dict


FIRST = ("ts", "level", "event", "comp")


def _order(_: Any, __: str, event_dict: MutableMapping[str, Any]) -> MutableMapping[str, Any]:
    """Put the fields a reader scans for first; the rest keep their order."""
    ordered = {k: event_dict[k] for k in FIRST if k in event_dict}
    ordered.update((k, v) for k, v in event_dict.items() if k not in ordered)
    return ordered


# A log call's method name -> its level; names not listed (`msg`) always pass.
_METHOD_LEVELS = {
    "debug": logging.DEBUG,
    "info": logging.INFO,
    "warning": logging.WARNING,
    "warn": logging.WARNING,
    "error": logging.ERROR,
    "exception": logging.ERROR,
    "critical": logging.CRITICAL,
    "fatal": logging.CRITICAL,
}


class _Threshold:
    """Drops lines below a level that can change while the daemon runs (`set_level`, on SIGHUP).

    A processor, not structlog's filtering wrapper: loggers bound once and kept (the
    supervisor's, the serve loop's) would otherwise keep the level they were bound under.
    """

    def __init__(self, level: int) -> None:
        self.level = level

    def __call__(self, _: Any, method: str, event_dict: MutableMapping[str, Any]) -> MutableMapping[str, Any]:
        if _METHOD_LEVELS.get(method, logging.CRITICAL) < self.level:
            raise structlog.DropEvent
        return event_dict


_THRESHOLD = _Threshold(logging.INFO)


def set_level(level: str) -> None:
    """Change the level of every logger, already bound ones included (a reload's `log_level`)."""
    _THRESHOLD.level = LEVELS.get(level, logging.INFO)


def configure(level: str = "info", *, stream: TextIO | None = None, strict: bool = False) -> None:
    """Configure structlog for JSON lines; safe to call again (tests, reload)."""
    set_level(level)
    structlog.configure(
        processors=[
            _THRESHOLD,
            structlog.contextvars.merge_contextvars,
            _Vocabulary(strict),
            structlog.processors.add_log_level,
            _timestamp,
            structlog.processors.format_exc_info,
            _order,
            structlog.processors.JSONRenderer(sort_keys=False),
        ],
        # Debug calls are dropped by `_THRESHOLD` below debug level; the wrapper passes everything.
        wrapper_class=structlog.make_filtering_bound_logger(logging.DEBUG),
        logger_factory=structlog.PrintLoggerFactory(stream or sys.stderr),
        cache_logger_on_first_use=False,
    )


def get(comp: str = "supervisor", **bound: Any) -> structlog.typing.FilteringBoundLogger:
    """A logger bound to a component (`supervisor`, `agent`, `mcp`, `intel`) and identity fields."""
    logger: structlog.typing.FilteringBoundLogger = structlog.get_logger().bind(comp=comp, **bound)
    return logger
