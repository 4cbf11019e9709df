"""Wire names and offered specs for tools: what the model sees, and the way back (pure).

A model-facing tool name matches `^[A-Za-z0-9_-]{1,64}$`. MCP tool `add` on server `demo` is
`demo__add`; characters outside the set become `_`; a name over 64 characters keeps a prefix and
gains a short hash of the real identity; names that still collide all take the hashed form.
The assignment depends only on the *set* of tools, never on listing order, and is injective.
Server-supplied descriptions and schemas are untrusted: they pass through, but bounded.
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from pydantic import JsonValue, TypeAdapter, ValidationError

from subagent.messages import JsonObject, ToolSpec

WIRE_NAME = re.compile(r"^[A-Za-z0-9_-]{1,64}$")
MAX_WIRE_NAME = 64
SEPARATOR = "__"
MAX_DESCRIPTION_CHARS = 2_000
MAX_SCHEMA_BYTES = 32_768
FALLBACK_SCHEMA: JsonObject = {"type": "object"}

_OUTSIDE = re.compile(r"[^A-Za-z0-9_-]")
_HASH_HEX = 8
_json_object: TypeAdapter[dict[str, JsonValue]] = TypeAdapter(dict[str, JsonValue])


@dataclass(frozen=True, slots=True, order=True)
class ToolRef:
    """The real identity of an MCP tool: the granted server's name and the tool's own name."""

    server: str
    tool: str


def sanitize(text: str) -> str:
    """`text` with every character outside `[A-Za-z0-9_-]` replaced by `_` (never empty)."""
    return _OUTSIDE.sub("_", text) or "_"


def _short_hash(ref: ToolRef) -> str:
    identity = f"{ref.server}\0{ref.tool}".encode()
    return hashlib.blake2b(identity, digest_size=_HASH_HEX // 2).hexdigest()


def _hashed(plain: str, ref: ToolRef) -> str:
    return f"{plain[: MAX_WIRE_NAME - _HASH_HEX - 1]}_{_short_hash(ref)}"


def plain_name(ref: ToolRef) -> str:
    """The name a tool gets when nothing collides with it: `server__tool`, bounded to 64."""
    plain = f"{sanitize(ref.server)}{SEPARATOR}{sanitize(ref.tool)}"
    return plain if len(plain) <= MAX_WIRE_NAME else _hashed(plain, ref)


def _with_counter(name: str, taken: set[str]) -> str:
    # Only reachable when a server forges a name equal to another tool's hashed form.
    n = 2
    while True:
        suffix = f"_{n}"
        candidate = f"{name[: MAX_WIRE_NAME - len(suffix)]}{suffix}"
        if candidate not in taken:
            return candidate
        n += 1


def assign_wire_names(refs: Iterable[ToolRef], *, reserved: Iterable[str] = ()) -> dict[str, ToolRef]:
    """Map every tool to a unique wire name; `reserved` names (the self-tools) are never handed out.

    Deterministic in the set of `refs`: a tool whose plain name is contested (by another tool or
    a reserved name) takes `prefix_<hash>` instead, where the hash is of its real identity.
    """
    taken = set(reserved)
    groups: dict[str, list[ToolRef]] = {}
    for ref in sorted(set(refs)):
        groups.setdefault(plain_name(ref), []).append(ref)
    names: dict[str, ToolRef] = {}
    contested: list[tuple[str, ToolRef]] = []
    for plain, group in sorted(groups.items()):
        if len(group) == 1 and plain not in taken:
            names[plain] = group[0]
        else:
            contested.extend((plain, ref) for ref in group)
    taken.update(names)
    for plain, ref in contested:
        name = _hashed(plain, ref)
        if name in taken:
            name = _with_counter(name, taken)
        names[name] = ref
        taken.add(name)
    return names


def cap_description(text: str | None, *, limit: int = MAX_DESCRIPTION_CHARS) -> str:
    """A server's description, cut at `limit` characters with a visible marker."""
    text = (text or "").strip()
    if len(text) <= limit:
        return text
    return f"{text[:limit]} […description truncated]"


def cap_schema(
    schema: Mapping[str, Any], *, limit_bytes: int = MAX_SCHEMA_BYTES
) -> tuple[JsonObject, str | None]:
    """A server's input schema as JSON data, or a permissive fallback and the reason it was dropped."""
    try:
        encoded = json.dumps(schema, separators=(",", ":"), ensure_ascii=False)
    except (TypeError, ValueError):
        return dict(FALLBACK_SCHEMA), "its input schema was not valid JSON"
    if len(encoded.encode()) > limit_bytes:
        return dict(FALLBACK_SCHEMA), f"its input schema exceeds {limit_bytes} bytes"
    try:
        return _json_object.validate_json(encoded), None
    except ValidationError:
        return dict(FALLBACK_SCHEMA), "its input schema is not a JSON object"


def offered_spec(wire_name: str, description: str | None, schema: Mapping[str, Any]) -> ToolSpec:
    """The `ToolSpec` the model is offered for one server tool, with bounded, untrusted text."""
    input_schema, dropped = cap_schema(schema)
    text = cap_description(description)
    if dropped is not None:
        text = f"{text} (Arguments unchecked: {dropped}.)".strip()
    return ToolSpec(name=wire_name, description=text, input_schema=input_schema)
