"""Durations and byte sizes as operators write them (`30s`, `1h30m`, `2G`), parsed exactly.

Pure and import-light: the config loader and the CLI use it on their fast path. Parsing goes
through `Decimal`, so `format_*` followed by `parse_*` returns the value it started from. Sizes
use binary multiples (`1K` = 1024 bytes), the way systemd reads `MemoryMax=`.
"""

from __future__ import annotations

import math
import re
from decimal import Decimal

from agentd.errors import AgentdError

DURATION_UNITS_S: dict[str, Decimal] = {
    "ms": Decimal("0.001"),
    "s": Decimal(1),
    "m": Decimal(60),
    "h": Decimal(3600),
    "d": Decimal(86400),
}
SIZE_UNITS: dict[str, int] = {"": 1, "k": 1 << 10, "m": 1 << 20, "g": 1 << 30, "t": 1 << 40}

_NUMBER = r"\d+(?:\.\d+)?"
_PLAIN = re.compile(rf"\s*({_NUMBER})\s*")
_DURATION_PART = re.compile(rf"\s*({_NUMBER})\s*(ms|s|m|h|d)", re.IGNORECASE)
_SIZE = re.compile(rf"\s*({_NUMBER})\s*([kmgt]?)(?:i?b)?\s*", re.IGNORECASE)
_ECHO_CHARS = 40


class DurationError(AgentdError, ValueError):
    """A value that is not a duration or size; the message says what was expected."""


def _echo(value: object) -> str:
    # Durations and sizes are never secrets, but a pasted blob should not flood an error message.
    text = repr(value)
    return text if len(text) <= _ECHO_CHARS else text[: _ECHO_CHARS - 3] + "..."


def _number(value: object, what: str) -> Decimal | None:
    """`value` as a Decimal when it is a plain number (int, float); None when it is not one."""
    if isinstance(value, bool):
        raise DurationError(f"expected {what}, got a boolean")
    if isinstance(value, int):
        number = Decimal(value)
    elif isinstance(value, float):
        if not math.isfinite(value):
            raise DurationError(f"expected {what}, got {_echo(value)}")
        number = Decimal(repr(value))
    else:
        return None
    if number < 0:
        raise DurationError(f"must not be negative, got {_echo(value)}")
    return number


def _text(value: object, what: str) -> str:
    if not isinstance(value, str):
        raise DurationError(f"expected {what}, got {type(value).__name__}")
    if value.strip().startswith("-"):
        raise DurationError(f"must not be negative, got {_echo(value)}")
    return value


def parse_duration(value: object) -> float:
    """Seconds in `value`: a number of seconds (`90`, `1.5`, `"90"`) or units (`500ms`, `30s`,
    `5m`, `2h`, `1d`, combined as `1h30m`).

    Raises:
        DurationError: `value` is negative, not finite, a boolean, or not in one of those forms.
    """
    what = "a duration like 30s, 5m, 2h, 1d or a number of seconds"
    number = _number(value, what)
    if number is not None:
        return float(number)
    value = _text(value, what)
    if plain := _PLAIN.fullmatch(value):
        return float(Decimal(plain.group(1)))
    total = Decimal(0)
    position = 0
    for part in _DURATION_PART.finditer(value):
        if part.start() != position:
            break
        total += Decimal(part.group(1)) * DURATION_UNITS_S[part.group(2).lower()]
        position = part.end()
    if position == 0 or value[position:].strip():
        raise DurationError(f"expected {what}, got {_echo(value)}")
    return float(total)


def format_duration(seconds: float) -> str:
    """The shortest exact spelling of `seconds` that `parse_duration` reads back: `1h30m`, `1.5s`."""
    if seconds < 0 or not math.isfinite(seconds):
        raise DurationError(f"cannot format {_echo(seconds)} as a duration")
    if seconds != int(seconds):
        return format(Decimal(repr(seconds)), "f") + "s"
    rest = int(seconds)
    if rest == 0:
        return "0s"
    parts = []
    for unit, size in (("d", 86400), ("h", 3600), ("m", 60), ("s", 1)):
        count, rest = divmod(rest, size)
        if count:
            parts.append(f"{count}{unit}")
    return "".join(parts)


def parse_size(value: object) -> int:
    """Bytes in `value`: a number of bytes (`1024`, `"1024"`) or binary units (`512K`, `512M`,
    `2G`, `1T`; a trailing `B` or `iB` is allowed, `1.5G` too when it is a whole number of bytes).

    Raises:
        DurationError: `value` is negative, fractional in bytes, a boolean, or not in those forms.
    """
    what = "a size like 512M, 2G or a number of bytes"
    number = _number(value, what)
    if number is None:
        value = _text(value, what)
        match = _SIZE.fullmatch(value)
        if match is None:
            raise DurationError(f"expected {what}, got {_echo(value)}")
        number = Decimal(match.group(1)) * SIZE_UNITS[match.group(2).lower()]
    if number != number.to_integral_value():
        raise DurationError(f"{_echo(value)} is not a whole number of bytes")
    return int(number)


def format_size(size_bytes: int) -> str:
    """`size_bytes` in the largest binary unit that divides it exactly: `2G`, `1536`, `3K`."""
    if size_bytes < 0:
        raise DurationError(f"cannot format {_echo(size_bytes)} as a size")
    for unit in ("T", "G", "M", "K"):
        multiple = SIZE_UNITS[unit.lower()]
        if size_bytes and size_bytes % multiple == 0:
            return f"{size_bytes // multiple}{unit}"
    return str(size_bytes)
