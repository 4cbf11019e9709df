"""Newline-delimited JSON framing with a hard line cap (docs/design.md §3).

Decoding never raises on bad input: an oversized, non-UTF-8, non-JSON or wrong-shape frame
comes back as a `FrameError` value, so a reader can count faults and keep going.
`LineSplitter` is the incremental, bounded splitter for a byte stream; it never buffers more
than `max_line` bytes of one line, however the peer behaves.
"""

from __future__ import annotations

import weakref
from dataclasses import dataclass
from typing import Any, Literal, TypeVar

from pydantic import BaseModel, TypeAdapter, ValidationError

MAX_FRAME = 16 * 1024 * 1024
"""The control channel's line cap in bytes, newline excluded."""

FrameErrorKind = Literal["oversize", "encoding", "json", "shape"]

T = TypeVar("T")


@dataclass(frozen=True, slots=True)
class FrameError:
    """A frame that could not become a message. `detail` never echoes the frame's content."""

    kind: FrameErrorKind
    detail: str
    size: int


@dataclass(frozen=True, slots=True)
class Oversize:
    """Marker yielded by `LineSplitter` for a line that exceeded the cap (its bytes were dropped)."""

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


class LineSplitter:
    """Splits a byte stream into lines, bounding memory to `max_line` bytes per line.

    A line longer than the cap is discarded as it streams in and reported once as `Oversize`
    when its newline arrives (or at `close()`), so a peer that floods without
    newlines costs at most `max_line` bytes of buffer.
    """

    def __init__(self, max_line: int = MAX_FRAME) -> None:
        self._max = max_line
        self._buf = bytearray()
        # Invariant: while discarding, _buf is empty and _dropped counts the skipped bytes.
        self._discarding = False
        self._dropped = 0

    @property
    def buffered(self) -> int:
        """Bytes held for the current partial line."""
        return len(self._buf)

    @property
    def discarding(self) -> bool:
        """True while the current line has exceeded the cap and is being dropped."""
        return self._discarding

    def feed(self, data: bytes) -> list[bytes | Oversize]:
        """Consume `data`; return every line it completed, in order."""
        out: list[bytes | Oversize] = []
        start = 0
        n = len(data)
        while start < n:
            nl = data.find(b"\n", start)
            end = n if nl < 0 else nl
            chunk_len = end - start
            if self._discarding:
                self._dropped += chunk_len
            elif len(self._buf) + chunk_len > self._max:
                self._dropped = len(self._buf) + chunk_len
                self._buf.clear()
                self._discarding = True
            else:
                self._buf += data[start:end]
            if nl < 0:
                break
            if self._discarding:
                out.append(Oversize(self._dropped))
                self._discarding = False
                self._dropped = 0
            else:
                out.append(bytes(self._buf))
                self._buf.clear()
            start = nl + 1
        return out

    def close(self) -> list[bytes | Oversize]:
        """End of stream: a trailing unterminated line is returned as-is (or as `Oversize`)."""
        if self._discarding:
            self._discarding = False
            size, self._dropped = self._dropped, 0
            return [Oversize(size)]
        if self._buf:
            line = bytes(self._buf)
            self._buf.clear()
            return [line]
        return []
