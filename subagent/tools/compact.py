"""The tool catalogue as the model is offered it, compactly (pure).

Servers describe their tools for humans and for generators: every schema repeats `$schema`,
titles and `additionalProperties: false`, and every description may end with the same sentence
("Only works within allowed directories."). On a small context window that boilerplate alone can
crowd out the task. `compact_catalogue` drops schema keywords that do not change which arguments
are valid for the model (`$schema`, `$id`, `$comment`, `title`, `additionalProperties: false`),
keeps a sentence repeated across tools only in the first description that has it, and cuts long
descriptions to a length that scales with the context window.
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Sequence
from dataclasses import replace

from pydantic import JsonValue

from subagent.messages import JsonObject, ToolSpec

# Schema keywords that annotate rather than constrain (for the model's purposes).
DROPPED_KEYWORDS = frozenset({"$schema", "$id", "$comment", "title"})
# Keywords whose value is a map of names to subschemas, a subschema, or a list of subschemas.
_SCHEMA_MAPS = frozenset({"properties", "patternProperties", "$defs", "definitions", "dependentSchemas"})
_SCHEMA_VALUES = frozenset(
    {"items", "additionalProperties", "not", "if", "then", "else", "contains", "propertyNames"}
)
_SCHEMA_LISTS = frozenset({"anyOf", "oneOf", "allOf", "prefixItems"})

# Description budgets in characters: a tool's description gets window/16 (≈ window/64 tokens),
# between these bounds; an argument's description half of that.
MIN_DESCRIPTION_CHARS = 200
MAX_DESCRIPTION_CHARS = 2_000
# A sentence in at least this many tools' descriptions is boilerplate.
REPEATED_IN = 3
_SENTENCE = re.compile(r"[^.!?\n]+(?:[.!?]+|\n|$)")
_MIN_SENTENCE_CHARS = 12
_SPACES = re.compile(r"[ \t]{2,}")


def description_limit(context_window: int) -> int:
    """Characters one tool description may take for a model with this context window."""
    return max(MIN_DESCRIPTION_CHARS, min(MAX_DESCRIPTION_CHARS, context_window // 16))


def cut(text: str, limit: int) -> str:
    """`text` at most `limit` characters, cut at a word boundary with an ellipsis."""
    text = text.strip()
    if len(text) <= limit:
        return text
    head = text[: limit - 1]
    space = head.rfind(" ")
    if space > limit // 2:
        head = head[:space]
    return head.rstrip(" ,;:") + "…"


_NULL = {"type": "null"}


def _optional_branch(schema: JsonObject) -> JsonObject | None:
    """`{"anyOf": [X, {"type": "null"}], "default": null}` (pydantic's `X | None = None`) → X.

    The model never needs to send the null: leaving the argument out means the same.
    """
    branches = schema.get("anyOf")
    if "default" not in schema or schema["default"] is not None or not isinstance(branches, list):
        return None
    rest = [b for b in branches if b != _NULL]
    if len(branches) != 2 or len(rest) != 1 or not isinstance(rest[0], dict):
        return None
    merged: JsonObject = {k: v for k, v in schema.items() if k not in ("anyOf", "default")}
    merged.update(rest[0])
    return merged


def compact_schema(
    schema: JsonValue, description_chars: int = MAX_DESCRIPTION_CHARS, drop: frozenset[str] = frozenset()
) -> JsonValue:
    """`schema` without annotation-only keywords, argument descriptions cut to `description_chars`
    (and those in `drop` removed)."""
    if not isinstance(schema, dict):
        return schema
    schema = _optional_branch(schema) or schema
    out: JsonObject = {}
    for key, value in schema.items():
        if key == "description" and isinstance(value, str) and value.strip() in drop:
            continue
        if key in DROPPED_KEYWORDS and not isinstance(value, (dict, list)):
            continue
        if key == "additionalProperties" and value is False:
            continue
        if key == "description" and isinstance(value, str):
            out[key] = cut(value, description_chars)
        elif key in _SCHEMA_MAPS and isinstance(value, dict):
            out[key] = {name: compact_schema(sub, description_chars, drop) for name, sub in value.items()}
        elif key in _SCHEMA_VALUES:
            out[key] = compact_schema(value, description_chars, drop)
        elif key in _SCHEMA_LISTS and isinstance(value, list):
            out[key] = [compact_schema(sub, description_chars, drop) for sub in value]
        else:
            out[key] = value
    return out


def _sentences(text: str) -> list[str]:
    return [s.strip() for s in _SENTENCE.findall(text) if s.strip()]


def _boilerplate(descriptions: Sequence[str]) -> frozenset[str]:
    """Sentences that recur across at least `REPEATED_IN` descriptions."""
    counts: Counter[str] = Counter()
    for text in descriptions:
        counts.update({s for s in _sentences(text) if len(s) >= _MIN_SENTENCE_CHARS})
    return frozenset(s for s, n in counts.items() if n >= REPEATED_IN)


def _without(text: str, drop: frozenset[str], seen: set[str]) -> str:
    """`text` without the boilerplate sentences an earlier description already carried."""
    for sentence in sorted(drop, key=len, reverse=True):
        if sentence not in text:
            continue
        if sentence in seen:
            text = text.replace(sentence, "")
        else:
            seen.add(sentence)
    return _SPACES.sub(" ", text).strip()


def _argument_descriptions(schema: JsonValue) -> list[str]:
    """The descriptions of a schema's top-level arguments."""
    properties = schema.get("properties") if isinstance(schema, dict) else None
    if not isinstance(properties, dict):
        return []
    found: list[str] = []
    for sub in properties.values():
        text = sub.get("description") if isinstance(sub, dict) else None
        if isinstance(text, str):
            found.append(text.strip())
    return found


def compact_catalogue(specs: Sequence[ToolSpec], context_window: int) -> tuple[ToolSpec, ...]:
    """Every spec rendered compactly for a model with `context_window` tokens (order kept).

    A sentence repeated across tool descriptions, and an argument description repeated across
    tools, stay only in the first tool that has them.
    """
    limit = description_limit(context_window)
    drop = _boilerplate([s.description for s in specs])
    seen: set[str] = set()
    argument_counts = Counter(d for s in specs for d in set(_argument_descriptions(s.input_schema)))
    repeated_arguments = {d for d, n in argument_counts.items() if n >= REPEATED_IN}
    out: list[ToolSpec] = []
    for spec in specs:
        description = _without(spec.description, drop, seen) if drop else spec.description
        mine = set(_argument_descriptions(spec.input_schema)) & repeated_arguments
        drop_arguments = frozenset(d for d in mine if d in seen)
        seen.update(mine)
        schema = compact_schema(spec.input_schema, max(80, limit // 2), drop_arguments)
        assert isinstance(schema, dict)
        out.append(replace(spec, description=cut(description, limit), input_schema=schema))
    return tuple(out)
