"""The checks every endpoint reply body goes through (pure): size caps, content type, strict JSON.

`transport` counts each body against its cap with `BodyCap` and sniffs the content type; the
adapters turn a 2xx body into a reply with `reply_from_body`, and every JSON decode in intel
goes through `decode_json`, which never raises: an oversized or undecodable body becomes a
`ModelReply(malformed=...)` or a problem value, the same way for every adapter.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass, field

from pydantic import JsonValue

from subagent.messages import ModelReply

MAX_BODY_BYTES = 32 * 1024 * 1024
MAX_ERROR_BODY_BYTES = 64 * 1024


@dataclass(frozen=True, slots=True)
class Received:
    """A 2xx reply body. `oversized` is set when it passed the cap and was cut off."""

    status: int
    body: bytes
    oversized: bool = False


@dataclass(frozen=True, slots=True)
class NotJson:
    """Why some text is not strict JSON: `kind` names the decoder's complaint (its exception class)."""

    kind: str


@dataclass(slots=True)
class BodyCap:
    """Counts a body's bytes against `limit_bytes`, keeping at most the first `keep_bytes`."""

    limit_bytes: int
    keep_bytes: int = 0
    size: int = 0
    _head: bytearray = field(default_factory=bytearray)

    def take(self, chunk: bytes) -> bool:
        """Count `chunk` and keep what fits; False once the body has gone past the limit."""
        self.size += len(chunk)
        room = self.keep_bytes - len(self._head)
        if room > 0:
            self._head += chunk[:room]
        return self.size <= self.limit_bytes

    @property
    def head_full(self) -> bool:
        """Whether nothing more would be kept: reading further can only count."""
        return len(self._head) >= self.keep_bytes

    @property
    def head(self) -> bytes:
        return bytes(self._head)


def is_json_content_type(content_type: str) -> bool:
    """Whether a `content-type` header announces a JSON body (a server that ignored `stream`)."""
    return content_type.startswith("application/json")


def decode_json(data: str | bytes) -> JsonValue | NotJson:
    """Strict JSON, or why not; never raises.

    NaN and Infinity are rejected, though Python accepts them: echoed back in the transcript
    they are invalid JSON, and the provider would reject every later request. Nesting too deep
    for the decoder is a `NotJson`, not a `RecursionError` escaping the adapter.
    """
    try:
        parsed: JsonValue = json.loads(data, parse_constant=_reject_constant)
    except (ValueError, RecursionError) as exc:  # JSONDecodeError and UnicodeDecodeError are ValueErrors
        return NotJson(type(exc).__name__)
    return parsed


def _reject_constant(name: str) -> JsonValue:
    raise ValueError(f"{name} is not JSON")


def reply_from_body(received: Received, parse: Callable[[JsonValue], ModelReply]) -> ModelReply:
    """`parse` applied to a 2xx body, or a malformed reply saying why the body is unusable."""
    if received.oversized:
        return ModelReply(malformed=f"the reply body exceeds {MAX_BODY_BYTES} bytes")
    data = decode_json(received.body)
    if isinstance(data, NotJson):
        return ModelReply(malformed="the reply body is not JSON")
    return parse(data)
