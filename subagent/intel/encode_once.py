"""Encode each transcript item once and reuse its bytes on every later request (docs/design.md §10).

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
        # Invariant: the latest request's items and their encodings, position by position; the
        # held items keep their ids from being reused while they are cached.
        self._items: list[Item] = []
        self._out: list[Encoded] = []

    def encode_all(self, items: Sequence[Item]) -> list[Encoded]:
        """Encodings of `items`, in order; afterwards only these items stay cached.

        A transcript grows by appending, so the longest common prefix (by identity) with the last
        request is reused wholesale; only the rest is looked up, and only new items are encoded.
        """
        previous_items, previous_out = self._items, self._out
        limit = min(len(items), len(previous_items))
        same = 0
        while same < limit and items[same] is previous_items[same]:
            same += 1
        out = previous_out[:same]
        if same < len(items):
            # Beyond the prefix (a stubbed or compacted transcript): find survivors by identity.
            known = {id(x): (x, e) for x, e in zip(previous_items[same:], previous_out[same:], strict=True)}
            for item in items[same:]:
                entry = known.get(id(item))
                if entry is None or entry[0] is not item:
                    entry = known[id(item)] = (item, self._encode(item))
                out.append(entry[1])
        self._items, self._out = list(items), out
        return list(out)  # the caller may insert into its copy (e.g. a system message)

    def __len__(self) -> int:
        return len({id(item) for item in self._items})


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
