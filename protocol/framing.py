"""Newline-delimited JSON framing with a hard line cap (docs/design.md §3).

Decoding never raises on bad input: an oversized, non-UTF-8, non-JSON or wrong-shape frame
comes back as a `FrameError` value, so a reader can count faults and keep going.
`LineSplitter` (`protocol.lines`, re-exported here) is the incremental, bounded splitter for a
byte stream; it never buffers more than `max_line` bytes of one line, however the peer behaves.
"""

from __future__ import annotations

import weakref
from dataclasses import dataclass
from typing import Any, Literal, TypeVar

from pydantic import BaseModel, TypeAdapter, ValidationError

# The bounded splitter needs no pydantic: it lives apart, for a client that reads plain JSON.
from protocol.lines import MAX_FRAME as MAX_FRAME
from protocol.lines import LineSplitter as LineSplitter
from protocol.lines import Oversize as Oversize

FrameErrorKind = Literal["oversize", "encoding", "json", "shape"]

T = TypeVar("T")


@dataclass(frozen=True, slots=True)
class FrameError:
    """A frame that could not become a message. `detail` never echoes the frame's content."""

    kind: FrameErrorKind
    detail: str
    size: int


def encode(message: BaseModel, *, context: dict[str, object] | None = None) -> bytes:
    """Serialise one message as a compact JSON line (newline included)."""
    return message.model_dump_json(exclude_none=False, context=context).encode() + b"\n"


def decode(line: bytes | Oversize, adapter: TypeAdapter[T], *, max_line: int = MAX_FRAME) -> T | FrameError:
    """Decode one line (without its newline) into a message of `adapter`'s type, or a `FrameError`."""
    if isinstance(line, Oversize):
        return FrameError("oversize", f"line exceeds {max_line} bytes", line.size)
    if len(line) > max_line:
        return FrameError("oversize", f"line exceeds {max_line} bytes", len(line))
    try:
        text = line.decode("utf-8")
    except UnicodeDecodeError as exc:
        return FrameError("encoding", f"invalid UTF-8 at byte {exc.start}", len(line))
    try:
        return adapter.validate_json(text)
    except ValidationError as exc:
        errors = exc.errors(include_url=False, include_input=False, include_context=False)
        if any(e["type"] == "json_invalid" for e in errors):
            return FrameError("json", "not a JSON document", len(line))
        first = errors[0] if errors else None
        known = _schema_names(adapter)
        # A loc segment may be a key taken from the frame (an extra field, a header name): mask it.
        where = (
            ".".join(str(p) if isinstance(p, int) or p in known else "*" for p in first["loc"])
            if first
            else ""
        )
        what = first["type"] if first else "invalid"
        return FrameError(
            "shape", f"{len(errors)} validation error(s); first: {what} at {where or '<root>'}", len(line)
        )


_NAMES: weakref.WeakKeyDictionary[TypeAdapter[Any], frozenset[str]] = weakref.WeakKeyDictionary()


def _schema_names(adapter: TypeAdapter[Any]) -> frozenset[str]:
    """Field names, aliases and union tags of `adapter`'s schema: the loc segments safe to echo."""
    cached = _NAMES.get(adapter)
    if cached is not None:
        return cached
    names: set[str] = set()
    stack: list[object] = [adapter.core_schema]
    while stack:
        node = stack.pop()
        if isinstance(node, dict):
            if node.get("type") in ("model-fields", "typed-dict"):
                for key, field in node["fields"].items():
                    names.add(key)
                    alias = field.get("validation_alias")
                    if isinstance(alias, str):
                        names.add(alias)
            elif node.get("type") == "tagged-union":
                names.update(k for k in node["choices"] if isinstance(k, str))
            stack.extend(node.values())
        elif isinstance(node, list | tuple):
            stack.extend(node)
    result = _NAMES[adapter] = frozenset(names)
    return result
