"""Which error an endpoint's HTTP failure is (pure): the docs/design.md §5 error table in one place.

    401, 403                        -> IntelFatal (auth)              never retried
    429                             -> IntelTransient (rate limited)  Retry-After honoured
    4xx/5xx: the server could not parse its own model's tool call
                                    -> ToolCallUnparsed               the model's malformed output
    4xx naming tools/functions, 5xx saying tools are unsupported
                                    -> ToolsRejected (config)         auto tool mode: JSON actions
    4xx/5xx naming the response schema, for a request that carried one
                                    -> ConstraintRejected (config)    asked again without it
    408, 409, 5xx (incl. 529)       -> IntelTransient
    400, 413 saying "context length" / "prompt is too long" -> ContextOverflow
    any other 4xx                   -> IntelFatal (our request or config is wrong)

The wordings are the servers' own (llama.cpp, vLLM, Ollama, LiteLLM relaying them); each phrase
below names the server that says it.

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
# A server's parser failed on its own model's output (the model wrote prose or a fenced object
# where the chat template expected a tool call). Matched in the lowercased error body.
UNPARSED_TOOL_CALL_PHRASES = (
    "the model produced output that does not match the expected",  # llama.cpp (500)
    "failed to parse input at pos",  # llama.cpp (500)
    "failed to parse tool call",  # llama.cpp: "... arguments as JSON" (500)
    "error parsing tool call",  # Ollama (500)
    "error in extracting tool call",  # vLLM tool parsers
    "tool call parsing failed",  # Ollama's model-specific parsers
)
# The server does not take a `tools` field at all (or not this one). 5xx bodies must say one of
# these; a 4xx body need only name tools or functions.
TOOLS_REJECTED_PHRASES = (
    "does not support tools",  # Ollama: "<model> does not support tools" (400)
    "tools param requires",  # llama.cpp without --jinja: "tools param requires --jinja flag" (400/500)
    "unsupported param: tools",  # older llama.cpp (500)
    "tool choice requires",  # vLLM: '"auto" tool choice requires --enable-auto-tool-choice ...' (400)
    "failed to parse tools",  # llama.cpp: a tool definition its template cannot take (500)
    "does not support function",
    "tool calling is not supported",
    "tools are not supported",
)
# The server does not take the request's response schema (`response_format`), or not this one.
# Matched only for a request that carried one.
CONSTRAINT_REJECTED_PHRASES = (
    "response_format",  # OpenAI, LM Studio, a strict server's "extra inputs" on the field
    "response format",
    "json_schema",  # llama.cpp: "Cannot use both json_schema and grammar"
    "schema conversion failed",  # llama.cpp: "JSON schema conversion failed: ..." (400/500)
    "json schema error",  # llama.cpp's schema parser
    "guided_json",  # vLLM
    "guided decoding",  # vLLM
    "structured output",  # vLLM, LM Studio
    "xgrammar",  # vLLM: "... features not supported by xgrammar"
    "unsupported schema",
    "invalid schema",
)
_NAMES_TOOLS = re.compile(r"\btools?\b|tool_choice|tool[ _]calls?|\bfunctions?\b|function[ _]call")


class EndpointFatal(IntelFatal):
    """An endpoint failure retrying cannot fix. `kind` is `auth` (credentials refused) or
    `config` (our request, URL or script is wrong); `status` is the HTTP code, if any."""

    def __init__(self, message: str, *, kind: Literal["auth", "config"], status: int | None = None) -> None:
        super().__init__(message)
        self.kind = kind
        self.status = status


class ToolsRejected(EndpointFatal):
    """The endpoint refused the request's tools (the server or model has no tool calling). Fatal
    for a `native` run; an `auto` run switches to JSON actions and asks again."""

    def __init__(self, message: str, *, status: int | None = None) -> None:
        super().__init__(message, kind="config", status=status)


class ToolCallUnparsed(IntelError):
    """The server could not parse its own model's output as a tool call: the model's malformed
    output, not an outage. The failover driver returns it as a malformed reply (never retried)."""

    kind = "malformed"

    def __init__(self, message: str, *, status: int | None = None) -> None:
        super().__init__(message)
        self.status = status


class ConstraintRejected(EndpointFatal):
    """The endpoint refused the request's response schema (no constrained decoding, or not for
    this schema). The failover driver asks again at once without it, and remembers the endpoint."""

    def __init__(self, message: str, *, status: int | None = None) -> None:
        super().__init__(message, kind="config", status=status)


class EndpointOverflow(ContextOverflow):
    """The endpoint said the request does not fit its context window."""

    def __init__(self, message: str, *, status: int | None = None) -> None:
        super().__init__(message)
        self.status = status


def classify_status(
    status: int, body: bytes, *, retry_after_s: float | None = None, constrained: bool = False
) -> IntelError:
    """The exception for a non-2xx reply with `status` and (size-capped) `body`; `constrained`
    says the request carried a response schema."""
    if status in AUTH_STATUSES:
        return EndpointFatal(f"authentication failed (HTTP {status})", kind="auth", status=status)
    if status == 429:
        return IntelTransient("rate limited (HTTP 429)", retry_after_s=retry_after_s, status=status)
    text = _text(body).lower()
    if says_tool_call_unparsed(text):
        detail = error_detail(body) or "its parser rejected the output"
        return ToolCallUnparsed(
            f"the server could not parse the model's tool call (HTTP {status}): {detail}", status=status
        )
    if any(phrase in text for phrase in TOOLS_REJECTED_PHRASES):
        return _tools_rejected(status, body, text)
    if constrained and any(phrase in text for phrase in CONSTRAINT_REJECTED_PHRASES):
        detail = error_detail(body) or re.sub(r"\s+", " ", text).strip()[:DETAIL_CHARS]
        return ConstraintRejected(
            f"the endpoint rejected the request's response schema (HTTP {status}): {detail}", status=status
        )
    if status in TRANSIENT_STATUSES or status >= 500:
        return IntelTransient(f"server error (HTTP {status})", retry_after_s=retry_after_s, status=status)
    detail = error_detail(body)
    if status in OVERFLOW_STATUSES and says_context_overflow(body):
        return EndpointOverflow(f"context length exceeded (HTTP {status})", status=status)
    if _NAMES_TOOLS.search(text):
        # A 4xx about tools or functions (an unknown field, a schema the server cannot take).
        return _tools_rejected(status, body, text)
    suffix = f": {detail}" if detail else ""
    return EndpointFatal(f"request rejected (HTTP {status}){suffix}", kind="config", status=status)


def says_tool_call_unparsed(text: str) -> bool:
    """Whether an error text says the server could not parse its model's tool call."""
    lowered = text.lower()
    return any(phrase in lowered for phrase in UNPARSED_TOOL_CALL_PHRASES)


def _tools_rejected(status: int, body: bytes, text: str) -> ToolsRejected:
    detail = error_detail(body) or re.sub(r"\s+", " ", text).strip()[:DETAIL_CHARS]
    return ToolsRejected(
        f"the endpoint rejected the request's tools (HTTP {status}): {detail}", status=status
    )


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
