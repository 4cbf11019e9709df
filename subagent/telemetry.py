"""How subagent components report events without knowing where they go.

A component takes an `EventSink` and calls it with a name from the closed vocabulary
(`protocol.events`) and JSON fields. Content capture is off by default: `describe` reduces a
text to its length and a short hash unless the task opted in.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable

from pydantic import JsonValue

from protocol.events import EventName

EventSink = Callable[[EventName, dict[str, JsonValue]], None]


def discard_events(event: EventName, fields: dict[str, JsonValue]) -> None:
    """An `EventSink` that drops everything (for tests and tools that run unobserved)."""


def digest(text: str | bytes) -> str:
    """A short, stable content hash for logs (not a security boundary)."""
    data = text.encode() if isinstance(text, str) else text
    return hashlib.blake2b(data, digest_size=8).hexdigest()


def describe(text: str, *, capture: bool, prefix: str = "content") -> dict[str, JsonValue]:
    """Fields describing `text`: length and hash, plus the text itself only when `capture` is on."""
    fields: dict[str, JsonValue] = {f"{prefix}_len": len(text), f"{prefix}_hash": digest(text)}
    if capture:
        fields[prefix] = text
    return fields
