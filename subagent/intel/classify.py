"""Which error an endpoint's HTTP failure is (pure): the DESIGN §5 error table in one place.

    401, 403                        -> IntelFatal (auth)              never retried
    429                             -> IntelTransient (rate limited)  Retry-After honoured
    408, 409, 5xx (incl. 529)       -> IntelTransient
    400, 413 saying "context length" / "prompt is too long" -> ContextOverflow
    any other 4xx                   -> IntelFatal (our request or config is wrong)

Messages carry the status and the provider's short error code or message, never the request
content and never anything from an auth failure's body (some servers echo part of the key).
"""

from __future__ import annotations

import re
from typing import Literal

from pydantic import JsonValue

from subagent.errors import ContextOverflow, IntelError, IntelFatal, IntelTransient
from subagent.intel.reply_body import NotJson, decode_json

AUTH_STATUSES = frozenset({401, 403})
TRANSIENT_STATUSES = frozenset({408, 409, 429, 500, 502, 503, 504, 529})
OVERFLOW_STATUSES = frozenset({400, 413})
OVERFLOW_CODES = frozenset({"context_length_exceeded", "exceed_context_size_error"})
OVERFLOW_PHRASES = (
    "maximum context length",
    "context length",
    "context_length",
    "context window",
    "context size",
    "prompt is too long",
)
DETAIL_CHARS = 200


class EndpointFatal(IntelFatal):
    """An endpoint failure retrying cannot fix. `kind` is `auth` (credentials refused) or
    `config` (our request, URL or script is wrong); `status` is the HTTP code, if any."""

    def __init__(self, message: str, *, kind: Literal["auth", "config"], status: int | None = None) -> None:
        super().__init__(message)
        self.kind = kind
        self.status = status


class EndpointOverflow(ContextOverflow):
    """The endpoint said the request does not fit its context window."""

    def __init__(self, message: str, *, status: int | None = None) -> None:
        super().__init__(message)
        self.status = status


def classify_status(status: int, body: bytes, *, retry_after_s: float | None = None) -> IntelError:
    """The exception for a non-2xx reply with `status` and (size-capped) `body`."""
    if status in AUTH_STATUSES:
        return EndpointFatal(f"authentication failed (HTTP {status})", kind="auth", status=status)
    if status == 429:
        return IntelTransient("rate limited (HTTP 429)", retry_after_s=retry_after_s, status=status)
    if status in TRANSIENT_STATUSES or status >= 500:
        return IntelTransient(f"server error (HTTP {status})", retry_after_s=retry_after_s, status=status)
    detail = error_detail(body)
    if status in OVERFLOW_STATUSES and says_context_overflow(body):
        return EndpointOverflow(f"context length exceeded (HTTP {status})", status=status)
    suffix = f": {detail}" if detail else ""
    return EndpointFatal(f"request rejected (HTTP {status}){suffix}", kind="config", status=status)


def says_context_overflow(body: bytes) -> bool:
    """Whether an error body reports that the prompt exceeds the context window."""
    parsed = _load(body)
    codes = {s.lower() for s in _strings(parsed, ("code", "type"))}
    if codes & OVERFLOW_CODES:
        return True
    texts = _strings(parsed, ("message", "error", "detail")) if parsed is not None else [_text(body)]
    return any(phrase in text.lower() for text in texts for phrase in OVERFLOW_PHRASES)


def error_detail(body: bytes) -> str:
    """A short, single-line description of an error body: its code/type and message, capped."""
    parsed = _load(body)
    if parsed is None:
        return ""
    parts = [*_strings(parsed, ("code", "type"))[:1], *_strings(parsed, ("message", "detail"))[:1]]
    detail = " ".join(re.sub(r"\s+", " ", part).strip() for part in parts if part.strip())
    return detail[:DETAIL_CHARS]


def _load(body: bytes) -> JsonValue:
    parsed = decode_json(body)
    return None if isinstance(parsed, NotJson) else parsed


def _text(body: bytes) -> str:
    return body[:65536].decode("utf-8", errors="replace")


def _strings(value: JsonValue, keys: tuple[str, ...], depth: int = 0) -> list[str]:
    """String (or int-coded) values under `keys` anywhere in a small JSON error object."""
    found: list[str] = []
    if depth > 4:
        return found
    if isinstance(value, dict):
        for key, item in value.items():
            if key in keys and isinstance(item, str | int) and not isinstance(item, bool):
                found.append(str(item))
            elif isinstance(item, dict | list):
                found.extend(_strings(item, keys, depth + 1))
    elif isinstance(value, list):
        for item in value[:8]:
            found.extend(_strings(item, keys, depth + 1))
    return found
