"""Building `ModelReply` values the same way in every adapter (pure).

Owns the two rules every adapter shares: a tool call's `arguments` must decode to a JSON
object or the call carries `arguments_error` plus the raw text (capped) for the model to see;
and when a provider reports no usage, tokens are estimated as characters / 4
(docs/loop.md, "Usage and the token estimate").
"""

from __future__ import annotations

import json
from dataclasses import replace

from pydantic import JsonValue

from subagent.intel.reply_body import NotJson, decode_json
from subagent.messages import JsonObject, ModelReply, TokenUsage, ToolCall, estimate_tokens

RAW_ARGUMENTS_CAP = 2000


def decode_arguments(call_id: str, name: str, raw: str) -> ToolCall:
    """A `ToolCall` from an `arguments` JSON string; an undecodable one is kept as an error."""
    if not raw.strip():
        # Several servers send "" for a call without parameters; that is an empty object.
        return ToolCall(id=call_id, name=name, arguments={})
    value = decode_json(raw)
    if isinstance(value, NotJson):
        return _bad_arguments(call_id, name, raw, f"arguments are not valid JSON ({value.kind})")
    if not isinstance(value, dict):
        return _bad_arguments(call_id, name, raw, f"arguments are a JSON {_json_kind(value)}, not an object")
    return ToolCall(id=call_id, name=name, arguments=value)


def object_arguments(call_id: str, name: str, value: JsonValue) -> ToolCall:
    """A `ToolCall` from arguments a provider already sent as JSON (not as a string)."""
    if isinstance(value, str):
        return decode_arguments(call_id, name, value)
    if value is None:
        return ToolCall(id=call_id, name=name, arguments={})
    if isinstance(value, dict):
        return ToolCall(id=call_id, name=name, arguments=value)
    raw = json.dumps(value)
    return _bad_arguments(call_id, name, raw, f"arguments are a JSON {_json_kind(value)}, not an object")


def _bad_arguments(call_id: str, name: str, raw: str, problem: str) -> ToolCall:
    return ToolCall(
        id=call_id, name=name, arguments=None, arguments_error=problem, raw_arguments=raw[:RAW_ARGUMENTS_CAP]
    )


def _json_kind(value: JsonValue) -> str:
    if isinstance(value, list):
        return "array"
    if isinstance(value, str):
        return "string"
    if isinstance(value, bool):
        return "boolean"
    if value is None:
        return "null"
    return "number"


def arguments_wire(call: ToolCall) -> str:
    """The `arguments` string to send back for a call: the raw text when it never decoded."""
    if call.arguments is None:
        return call.raw_arguments
    return json.dumps(call.arguments, ensure_ascii=False, separators=(",", ":"))


def arguments_object(call: ToolCall) -> JsonObject:
    """The arguments as an object for providers that require one (an undecodable call is `{}`)."""
    return call.arguments if call.arguments is not None else {}


def reply_chars(reply: ModelReply) -> int:
    """Characters the model produced: text, refusal, and each tool call's name and arguments."""
    calls = sum(len(c.name) + len(arguments_wire(c)) for c in reply.tool_calls)
    return len(reply.text) + len(reply.refusal or "") + calls


def with_estimated_usage(reply: ModelReply, request_chars: int) -> ModelReply:
    """`reply`, with usage estimated from sizes if the provider reported none."""
    if reply.usage is not None:
        return reply
    usage = TokenUsage(
        tokens_in=estimate_tokens(request_chars),
        tokens_out=estimate_tokens(reply_chars(reply)),
        estimated=True,
    )
    return replace(reply, usage=usage)
