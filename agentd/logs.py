"""Log lines on stderr with the closed event vocabulary (docs/design.md §13): JSON, or text for a person.

Every line has `ts` (UTC, milliseconds), `level`, `event` (a name from `protocol.events`),
`comp`, and whatever identity the caller binds (`task_id`, `run_id`, `handle`, `pid`, …).
As JSON (for journald and log shippers) each line is one object; as text (a daemon in a
terminal) it reads `ts level event key=value …`, the same fields in the same order.
An event name outside the vocabulary is a programming error: in strict mode (tests) it raises,
otherwise the line is kept and marked `event_unknown: true`.
"""

from __future__ import annotations

import json
import logging
import sys
import time
from collections.abc import MutableMapping
from typing import Any, Literal, TextIO

import structlog

from protocol.events import EVENT_NAMES

LEVELS = {"debug": logging.DEBUG, "info": logging.INFO, "warning": logging.WARNING, "error": logging.ERROR}


# The last whole second formatted, and its text (one tuple, so a thread reads a consistent pair).
_second: tuple[int, str] = (-1, "")


def _ts(now: float) -> str:
    global _second
    second, text = _second
    if second != int(now):  # strftime once a second, not once a line
        second = int(now)
        text = time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(second))
        _second = (second, text)
    return f"{text}.{int(now % 1 * 1000):03d}Z"


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


def enabled(level: str) -> bool:
    """Whether a line at `level` would be written now: a hot path skips building one that is not."""
    return LEVELS.get(level, logging.CRITICAL) >= _THRESHOLD.level


def _fallback(value: Any) -> Any:
    """What JSON cannot encode: its `__structlog__()`, else its repr (as structlog's renderer)."""
    try:
        return value.__structlog__()
    except AttributeError:
        return repr(value)


# structlog's `add_log_level`: `warn` is an alias, `exception` logs at error.
_LEVEL_NAMES = {"warn": "warning", "exception": "error"}


LogFormat = Literal["json", "text"]
# A text value is written bare when a reader (or `cut`, `grep`) can tell where it ends.
_BARE = frozenset("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_-.:/@+,")


def _text_value(value: Any) -> str:
    if isinstance(value, str) and value and _BARE.issuperset(value):
        return value
    return json.dumps(value, default=_fallback, ensure_ascii=False)


def render_text(line: dict[str, Any]) -> str:
    """One line for a person: `ts level event comp=… key=value …`, values JSON-quoted when needed."""
    head = f"{line.get('ts', '')} {line.get('level', ''):<7} {line.get('event', '')}"
    rest = " ".join(f"{k}={_text_value(v)}" for k, v in line.items() if k not in ("ts", "level", "event"))
    return f"{head}  {rest}" if rest else head


def default_format(stream: TextIO) -> LogFormat:
    """Text when `stream` is a terminal (a daemon run by hand), JSON otherwise (journald, a file)."""
    try:
        return "text" if stream.isatty() else "json"
    except (AttributeError, ValueError):  # a closed or stand-in stream
        return "json"


class _Line:
    """The whole pipeline in one pass: threshold, vocabulary, level, timestamp, exception, field
    order, rendering — what the chain of eight processors did, at a third of its cost per line (each
    processor was a call and most copied the dict; a daemon writes ~9 lines per task).
    Fields: `ts`, `level`, `event`, `comp` first, then the rest in the order given."""

    def __init__(self, strict: bool, fmt: LogFormat = "json") -> None:
        self.vocabulary = _Vocabulary(strict)
        self.text = fmt == "text"

    def __call__(self, logger: Any, method: str, event_dict: MutableMapping[str, Any]) -> str:
        if _METHOD_LEVELS.get(method, logging.CRITICAL) < _THRESHOLD.level:
            raise structlog.DropEvent
        self.vocabulary(logger, method, event_dict)
        if "exc_info" in event_dict:
            structlog.processors.format_exc_info(logger, method, event_dict)
        line: dict[str, Any] = {
            "ts": _ts(time.time()),
            "level": _LEVEL_NAMES.get(method, method),
        }
        if "event" in event_dict:
            line["event"] = event_dict["event"]
        if "comp" in event_dict:
            line["comp"] = event_dict["comp"]
        for key, value in event_dict.items():
            if key not in line:
                line[key] = value
        if self.text:
            return render_text(line)
        return json.dumps(line, default=_fallback)


def configure(
    level: str = "info",
    *,
    stream: TextIO | None = None,
    strict: bool = False,
    fmt: LogFormat = "json",
) -> None:
    """Configure structlog's lines, JSON or text (`default_format` picks for a daemon); safe to
    call again (tests, reload)."""
    global _BASE
    set_level(level)
    target = stream or sys.stderr
    structlog.configure(
        # One processor (`_Line`); nothing binds structlog's contextvars, so none are merged.
        processors=[_Line(strict, fmt)],
        # Debug calls are dropped by the threshold below debug level; the wrapper passes everything.
        wrapper_class=structlog.make_filtering_bound_logger(logging.DEBUG),
        logger_factory=structlog.PrintLoggerFactory(target),
        cache_logger_on_first_use=False,
    )
    _BASE = None


# The configured logger, built once per `configure`: binding it is a dict copy, where binding
# `structlog.get_logger()`'s lazy proxy assembled a logger from the configuration every time.
_BASE: structlog.typing.FilteringBoundLogger | None = None


def get(comp: str = "supervisor", **bound: Any) -> structlog.typing.FilteringBoundLogger:
    """A logger bound to a component (`supervisor`, `agent`, `mcp`, `intel`) and identity fields."""
    global _BASE
    if _BASE is None:
        _BASE = structlog.get_logger().bind()
    logger: structlog.typing.FilteringBoundLogger = _BASE.bind(comp=comp, **bound)
    return logger
