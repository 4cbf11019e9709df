"""The OpenAI chat-completions wire format (pure): message encoding and reply parsing.

Encoding works per message so the adapter can cache each message's bytes (docs/design.md §10). Parsing
never raises: a body that is not the expected shape becomes `ModelReply(malformed=...)`, with a
description of what was wrong and no echo of the content.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import TypeGuard

from pydantic import JsonValue

from subagent.intel.encode_once import EncodeOnceCache, json_bytes
from subagent.intel.replies import arguments_wire, object_arguments
from subagent.messages import (
    AssistantMessage,
    Message,
    ModelReply,
    ResponseSchema,
    TokenUsage,
    ToolCall,
    ToolResultMessage,
    ToolSpec,
    UserMessage,
)

CONTENT_FILTERED = "content filtered"


def encode_message(message: Message) -> bytes:
    """One transcript message as an OpenAI chat message (JSON bytes)."""
    if isinstance(message, UserMessage):
        return json_bytes({"role": "user", "content": message.text})
    if isinstance(message, ToolResultMessage):
        return json_bytes({"role": "tool", "tool_call_id": message.call_id, "content": message.text})
    return json_bytes(_assistant(message))


def encode_image_turn(message: ToolResultMessage) -> bytes:
    """The user message carrying a tool result's images as `image_url` data-URL parts.

    A `tool` message can only hold text, so the images follow the batch of tool messages.
    """
    parts: list[JsonValue] = [
        {"type": "text", "text": f"[images from tool call {message.call_id} ({message.name})]"}
    ]
    parts += [
        {"type": "image_url", "image_url": {"url": f"data:{image.mime_type};base64,{image.data}"}}
        for image in message.images
    ]
    return json_bytes({"role": "user", "content": parts})


def with_image_turns(
    messages: Sequence[Message], encoded: list[bytes], image_turns: EncodeOnceCache[ToolResultMessage, bytes]
) -> list[bytes]:
    """`encoded` with an image turn after each run of tool messages that carried images.

    Inserted after the whole run: a user message between the tool messages of one assistant
    turn is refused by the API.
    """
    with_images = [m for m in messages if isinstance(m, ToolResultMessage) and m.images]
    if not with_images:
        image_turns.encode_all(())
        return encoded
    turns = dict(zip((id(m) for m in with_images), image_turns.encode_all(with_images), strict=True))
    out: list[bytes] = []
    pending: list[bytes] = []
    for message, data in zip(messages, encoded, strict=True):
        if not isinstance(message, ToolResultMessage):
            out.extend(pending)
            pending = []
        out.append(data)
        if isinstance(message, ToolResultMessage) and id(message) in turns:
            pending.append(turns[id(message)])
    out.extend(pending)
    return out


def _assistant(message: AssistantMessage) -> dict[str, JsonValue]:
    if not message.tool_calls:
        return {"role": "assistant", "content": message.text}
    calls: list[JsonValue] = [
        {"id": c.id, "type": "function", "function": {"name": c.name, "arguments": arguments_wire(c)}}
        for c in message.tool_calls
    ]
    # With tool calls, an empty text is sent as null: some servers reject "" next to tool_calls.
    return {"role": "assistant", "content": message.text or None, "tool_calls": calls}


def encode_system(system: str) -> bytes:
    return json_bytes({"role": "system", "content": system})


def encode_tool(tool: ToolSpec) -> bytes:
    """A tool as an OpenAI function definition (JSON bytes)."""
    function: dict[str, JsonValue] = {
        "name": tool.name,
        "description": tool.description,
        "parameters": tool.input_schema,
    }
    return json_bytes({"type": "function", "function": function})


def response_format(schema: ResponseSchema) -> JsonValue:
    """`response_format` asking for a reply that satisfies `schema` (OpenAI structured outputs;
    llama.cpp, vLLM and LM Studio read the same field and compile it to a grammar)."""
    inner: dict[str, JsonValue] = {"name": schema.name, "schema": schema.schema}
    if schema.strict:
        inner["strict"] = True
    return {"type": "json_schema", "json_schema": inner}


def parse_completion(data: JsonValue, new_id: Callable[[], str]) -> ModelReply:
    """A `ModelReply` from a decoded chat-completion body (malformed if it has the wrong shape)."""
    if not isinstance(data, dict):
        return ModelReply(malformed="the reply is not a JSON object")
    choices = data.get("choices")
    if not isinstance(choices, list) or not choices or not isinstance(choices[0], dict):
        return ModelReply(malformed="the reply has no choices")
    message = choices[0].get("message")
    if not isinstance(message, dict):
        return ModelReply(malformed="the reply's first choice has no message")
    text = content_text(message.get("content"))
    if text is None:
        return ModelReply(malformed="the reply's message content is not text")
    calls = parse_tool_calls(message.get("tool_calls"), new_id)
    if isinstance(calls, str):
        return ModelReply(malformed=calls)
    finish = choices[0].get("finish_reason")
    finish_reason = finish if isinstance(finish, str) else None
    refusal_value = message.get("refusal")
    return ModelReply(
        text=text,
        tool_calls=calls,
        refusal=refusal_of(refusal_value if isinstance(refusal_value, str) else None, finish_reason),
        usage=parse_usage(data.get("usage")),
        finish_reason=finish_reason,
        model=_str(data.get("model")),
    )


def refusal_of(refusal: str | None, finish_reason: str | None) -> str | None:
    """The structured refusal: the `refusal` field, or a content filter stopping the reply."""
    if refusal is not None:
        return refusal or "refused"
    if finish_reason == "content_filter":
        return CONTENT_FILTERED
    return None


def content_text(content: JsonValue) -> str | None:
    """Message content as text: a string, null, or a list of text parts; None if none of these."""
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        parts: list[str] = []
        for part in content:
            if not isinstance(part, dict):
                return None
            value = part.get("text")
            if isinstance(value, str):
                parts.append(value)
        return "".join(parts)
    return None


def parse_tool_calls(value: JsonValue, new_id: Callable[[], str]) -> tuple[ToolCall, ...] | str:
    """The message's tool calls, or a string saying why they are malformed."""
    if value is None:
        return ()
    if not isinstance(value, list):
        return "tool_calls is not a list"
    calls: list[ToolCall] = []
    for item in value:
        function = item.get("function") if isinstance(item, dict) else None
        if not isinstance(item, dict) or not isinstance(function, dict):
            return "a tool call has no function"
        name = function.get("name")
        if not isinstance(name, str) or not name:
            return "a tool call has no function name"
        call_id = item.get("id")
        calls.append(object_arguments(_str(call_id) or new_id(), name, function.get("arguments")))
    return tuple(calls)


def parse_usage(value: JsonValue) -> TokenUsage | None:
    """`usage.prompt_tokens` / `completion_tokens`, or None if the server did not report them."""
    if not isinstance(value, dict):
        return None
    prompt, completion = value.get("prompt_tokens"), value.get("completion_tokens")
    if _count(prompt) and _count(completion):
        details = value.get("prompt_tokens_details")
        cached = details.get("cached_tokens") if isinstance(details, dict) else None
        return TokenUsage(tokens_in=prompt, tokens_out=completion, cached_in=cached if _count(cached) else 0)
    return None


def _count(value: JsonValue) -> TypeGuard[int]:
    return isinstance(value, int) and not isinstance(value, bool) and value >= 0


def _str(value: JsonValue) -> str:
    return value if isinstance(value, str) else ""
