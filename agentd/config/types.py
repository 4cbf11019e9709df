"""Field types shared by the configuration sections: durations, sizes, paths, names.

Each type parses what an operator writes (`"30s"`, `"2G"`, `"~/keys/openai"`) into the value the
daemon uses (seconds, bytes, an absolute path) and publishes a JSON Schema that accepts the same
spellings. Relative paths are resolved against the directory of the file that wrote them, which
the loader passes in the validation context as `base_dir`.
"""

from __future__ import annotations

import os
import shlex
from pathlib import Path
from typing import Annotated

from pydantic import (
    AfterValidator,
    BeforeValidator,
    Field,
    PlainSerializer,
    ValidationInfo,
    WithJsonSchema,
)

from agentd.config.duration import format_duration, format_size, parse_duration, parse_size
from protocol.spawn import Name

__all__ = [
    "Command",
    "ConfigPath",
    "CountOrInfinity",
    "Duration",
    "EnvName",
    "HeaderName",
    "Name",
    "Seconds",
    "Size",
    "SizeOrInfinity",
    "WholeSecondsOrInfinity",
]

INFINITY_WORDS = frozenset({"infinity", "unlimited"})
_DURATION_SCHEMA = {
    "anyOf": [
        {"type": "number", "minimum": 0},
        {"type": "string", "description": "a duration: 500ms, 30s, 5m, 2h, 1d, 1h30m, or seconds"},
    ]
}
_SIZE_SCHEMA = {
    "anyOf": [
        {"type": "integer", "minimum": 0},
        {"type": "string", "description": "a size in bytes or with a binary unit: 512M, 2G"},
    ]
}


def _resolve_path(value: str, info: ValidationInfo) -> str:
    if not value.strip():
        raise ValueError("must not be empty")
    path = Path(os.path.expanduser(value))
    context = info.context
    base = context.get("base_dir") if isinstance(context, dict) else None
    if not path.is_absolute() and isinstance(base, Path):
        path = base / path
    return str(path)


def _split_command(value: object) -> object:
    # A string is split the way a POSIX shell would split words, without running a shell:
    # no expansion, no redirection, so a config can never smuggle shell syntax into an argv.
    if isinstance(value, str):
        try:
            return shlex.split(value)
        except ValueError as exc:
            raise ValueError(f"cannot split the command like a shell would: {exc}") from None
    return value


def _whole_seconds_or_infinity(value: object) -> int | None:
    if isinstance(value, str) and value.strip().lower() in INFINITY_WORDS:
        return None
    seconds = parse_duration(value)
    if seconds != int(seconds):
        raise ValueError("must be a whole number of seconds")
    return int(seconds)


def _count_or_infinity(value: object) -> object:
    if isinstance(value, str) and value.strip().lower() in INFINITY_WORDS:
        return None
    return value


def _size_or_infinity(value: object) -> int | None:
    if isinstance(value, str) and value.strip().lower() in INFINITY_WORDS:
        return None
    return parse_size(value)


def _show_optional_size(value: int | None) -> str:
    return "infinity" if value is None else format_size(value)


# The validators of the duration types: a bound on a field they parse is a number of seconds.
DURATION_PARSERS = frozenset({parse_duration, _whole_seconds_or_infinity})


# A span written as a number of seconds or with units; kept as float seconds. Used for keys whose
# name ends in `_s`, so a plain number reads as seconds either way.
Seconds = Annotated[float, BeforeValidator(parse_duration), WithJsonSchema(_DURATION_SCHEMA)]
# A span for a key without a unit in its name (`deadline = "10m"`); shown back in the same form.
Duration = Annotated[
    float,
    BeforeValidator(parse_duration),
    PlainSerializer(format_duration, return_type=str),
    WithJsonSchema(_DURATION_SCHEMA),
]
Size = Annotated[
    int,
    BeforeValidator(parse_size),
    PlainSerializer(format_size, return_type=str),
    WithJsonSchema(_SIZE_SCHEMA),
]
SizeOrInfinity = Annotated[
    int | None,
    BeforeValidator(_size_or_infinity),
    PlainSerializer(_show_optional_size, return_type=str),
    WithJsonSchema({"anyOf": [*_SIZE_SCHEMA["anyOf"], {"enum": ["infinity", "unlimited"]}]}),
]
WholeSecondsOrInfinity = Annotated[
    int | None,
    BeforeValidator(_whole_seconds_or_infinity),
    WithJsonSchema({"anyOf": [*_DURATION_SCHEMA["anyOf"], {"enum": ["infinity", "unlimited"]}]}),
]
CountOrInfinity = Annotated[
    int | None,
    BeforeValidator(_count_or_infinity),
    WithJsonSchema({"anyOf": [{"type": "integer", "minimum": 1}, {"enum": ["infinity", "unlimited"]}]}),
]
ConfigPath = Annotated[str, AfterValidator(_resolve_path)]
Command = Annotated[
    list[Annotated[str, Field(min_length=1)]],
    BeforeValidator(_split_command),
    WithJsonSchema(
        {
            "anyOf": [
                {"type": "array", "items": {"type": "string"}, "minItems": 1},
                {"type": "string", "description": "split into words like a POSIX shell (no expansion)"},
            ]
        }
    ),
]
EnvName = Annotated[str, Field(pattern=r"^[A-Za-z_][A-Za-z0-9_]*$", max_length=256)]
HeaderName = Annotated[str, Field(pattern=r"^[!#$%&'*+.^_`|~0-9A-Za-z-]+$", max_length=256)]
