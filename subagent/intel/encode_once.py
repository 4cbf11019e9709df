"""Encode each transcript item once and reuse its bytes on every later request (DESIGN §10).

A transcript only grows by appending immutable messages, so an item's wire encoding never
changes: the cache keys it by object identity, holds a reference to the object (so its `id`
cannot be recycled by a new object while the entry lives), and keeps only the entries the
latest request used. A turn therefore costs the encoding of its new messages, not the history.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Generic, TypeVar

from pydantic import JsonValue
from pydantic_core import to_json

Item = TypeVar("Item")
Encoded = TypeVar("Encoded")


class EncodeOnceCache(Generic[Item, Encoded]):
    """Maps items to their encodings, calling `encode` only for items it has not seen."""

    def __init__(self, encode: Callable[[Item], Encoded]) -> None:
        self._encode = encode
        # Invariant: key == id(entry[0]); the held item keeps the id from being reused.
        self._entries: dict[int, tuple[Item, Encoded]] = {}

    def encode_all(self, items: Sequence[Item]) -> list[Encoded]:
        """Encodings of `items`, in order; afterwards only these items stay cached."""
        previous = self._entries
        current: dict[int, tuple[Item, Encoded]] = {}
        out: list[Encoded] = []
        for item in items:
            key = id(item)
            entry = current.get(key) or previous.get(key)
            if entry is None or entry[0] is not item:
                entry = (item, self._encode(item))
            current[key] = entry
            out.append(entry[1])
        self._entries = current
        return out

    def __len__(self) -> int:
        return len(self._entries)


def json_bytes(value: JsonValue) -> bytes:
    """Compact UTF-8 JSON (no ASCII escaping), the encoding every adapter sends."""
    return to_json(value)


def join_array(parts: Sequence[bytes]) -> bytes:
    """A JSON array from already-encoded elements."""
    return b"[" + b",".join(parts) + b"]"


def with_fields(head: dict[str, JsonValue], encoded: dict[str, bytes]) -> bytes:
    """A JSON object of `head`'s fields followed by fields whose values are already encoded."""
    body = json_bytes(head)
    if not encoded:
        return body
    tail = b",".join(json_bytes(key) + b":" + value for key, value in encoded.items())
    separator = b"," if body != b"{}" else b""
    return body[:-1] + separator + tail + b"}"
