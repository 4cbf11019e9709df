"""Turning pydantic validation errors into `ConfigProblem`s an operator can act on.

Each problem names the dotted key (`mcp.fs.command`, `trigger[0].route`) and says what is wrong
in plain words; an unknown key lists the keys allowed there and the closest match. Messages are
built from pydantic's error type and text, never from the input value, so a secret that landed
in the wrong place is not echoed.
"""

from __future__ import annotations

import difflib
import re
import types
from collections.abc import Mapping
from typing import Any, Union, get_args, get_origin

from pydantic import BaseModel, ValidationError
from pydantic.fields import FieldInfo

from agentd.config.duration import format_duration
from agentd.config.types import DURATION_PARSERS
from agentd.errors import ConfigProblem

_BARE_KEY = re.compile(r"^[A-Za-z0-9_-]+$")
# What the patterns of the config's name types mean, in words (pydantic would print the regex).
_PATTERN_WORDS = {
    r"^[A-Za-z0-9][A-Za-z0-9_.-]*$": "use letters, digits, '_', '.' and '-', starting with a letter or digit",
    r"^[A-Za-z_][A-Za-z0-9_]*$": "must be an environment variable name (letters, digits and '_', "
    "not starting with a digit)",
    r"^[!#$%&'*+.^_`|~0-9A-Za-z-]+$": "must be an HTTP header name",
}


# pydantic's bound errors: the word for each, and the key of the bound in the error's context.
_BOUNDS = {
    "greater_than_equal": ("at least", "ge"),
    "greater_than": ("more than", "gt"),
    "less_than_equal": ("at most", "le"),
    "less_than": ("less than", "lt"),
}


def bound_message(kind: str, ctx: Mapping[str, object] | None, *, seconds: bool) -> str | None:
    """A bound error (`greater_than_equal`, …) as `must be at least 1s` (durations carry their
    unit) or `must be at least 1`; None for any other kind of error."""
    if kind not in _BOUNDS or not ctx:
        return None
    word, name = _BOUNDS[kind]
    limit = ctx.get(name)
    if not isinstance(limit, int | float):
        return None
    shown = format_duration(float(limit)) if seconds else f"{limit:g}"
    return f"must be {word} {shown}"


def pattern_words(pattern: str) -> str:
    """What a name pattern means, in words (never the regular expression itself)."""
    return _PATTERN_WORDS.get(pattern, "has characters that are not allowed here")


def _parsed_as_duration(annotation: Any) -> bool:
    if any(getattr(m, "func", None) in DURATION_PARSERS for m in getattr(annotation, "__metadata__", ())):
        return True
    return any(_parsed_as_duration(arg) for arg in get_args(annotation))


def is_duration(field: FieldInfo) -> bool:
    """Whether the field takes a duration (its bounds are seconds)."""
    if any(getattr(m, "func", None) in DURATION_PARSERS for m in field.metadata):
        return True
    return _parsed_as_duration(field.annotation)


def _field_at(root: type[BaseModel], loc: tuple[int | str, ...]) -> FieldInfo | None:
    model = model_at(root, loc[:-1]) if loc else None
    if model is None:
        return None
    return next((f for name, f in model.model_fields.items() if loc[-1] in (name, f.alias)), None)


def render_key(loc: tuple[int | str, ...], prefix: str = "") -> str:
    """`("mcp", "my srv", "env")` → `mcp."my srv".env`; list indices render as `[0]`."""
    key = prefix
    for part in loc:
        if isinstance(part, int):
            key += f"[{part}]"
            continue
        text = part if _BARE_KEY.match(part) else f'"{part}"'
        key = f"{key}.{text}" if key else text
    return key


def _unwrap(annotation: Any) -> Any:
    """The model class reached through Optional/Annotated/list/dict, or the annotation itself."""
    while True:
        origin = get_origin(annotation)
        if origin is None:
            return annotation
        args = [a for a in get_args(annotation) if a is not type(None)]
        if origin in (Union, types.UnionType):
            models = [a for a in args if isinstance(_unwrap(a), type) and issubclass(_unwrap(a), BaseModel)]
            if not models:
                return annotation
            annotation = models[0]
        elif origin is dict:
            annotation = args[1]
        elif args:
            annotation = args[0]
        else:
            return annotation


def model_at(root: type[BaseModel], loc: tuple[int | str, ...]) -> type[BaseModel] | None:
    """The model whose keys live at `loc` (skipping dict keys and list indices), if any."""
    current: Any = root
    pending_container = False
    for part in loc:
        if pending_container:
            pending_container = False
            continue
        if not (isinstance(current, type) and issubclass(current, BaseModel)):
            return None
        field = next(
            (f for name, f in current.model_fields.items() if part in (name, f.alias)),
            None,
        )
        if field is None:
            return None
        origin = get_origin(field.annotation)
        pending_container = origin in (dict, list) or any(
            get_origin(a) in (dict, list) for a in get_args(field.annotation)
        )
        current = _unwrap(field.annotation)
    if isinstance(current, type) and issubclass(current, BaseModel):
        return current
    return None


def allowed_keys(model: type[BaseModel]) -> list[str]:
    """The keys a config table of `model` accepts (aliases, as written in the file)."""
    return [
        f.alias or name
        for name, f in model.model_fields.items()
        if f.exclude is not True  # hidden refusal fields such as intelligence.*.api_key
    ]


def _message(error: Any, root: type[BaseModel]) -> str:
    kind = error["type"]
    loc = tuple(error["loc"])
    if kind == "extra_forbidden":
        model = model_at(root, loc[:-1])
        if model is None:
            return "unknown key"
        keys = allowed_keys(model)
        close = difflib.get_close_matches(str(loc[-1]), keys, n=1)
        hint = f"did you mean {close[0]!r}? " if close else ""
        return f"unknown key; {hint}allowed here: {', '.join(keys)}"
    if kind == "missing":
        return "required key is missing"
    field = _field_at(root, loc)
    bound = bound_message(kind, error.get("ctx"), seconds=field is not None and is_duration(field))
    if bound is not None:
        return bound
    message = str(error["msg"])
    for prefix in ("Value error, ", "Assertion failed, "):
        message = message.removeprefix(prefix)
    if message.startswith("Input should be"):
        message = "should be" + message.removeprefix("Input should be")
    elif kind == "string_pattern_mismatch":
        message = pattern_words(str(error.get("ctx", {}).get("pattern", "")))
    return message


def problems_from_validation(
    exc: ValidationError, root: type[BaseModel], prefix: str = ""
) -> list[ConfigProblem]:
    """One problem per pydantic error, keyed by its dotted path under `prefix`."""
    problems = []
    for error in exc.errors(include_url=False, include_input=False):
        loc = tuple(part for part in error["loc"] if part != "[key]")
        key = render_key(loc, prefix)
        if "[key]" in error["loc"]:
            problems.append(ConfigProblem(key, f"this name is not allowed: {_message(error, root)}"))
        else:
            problems.append(ConfigProblem(key, _message(error, root)))
    return problems
