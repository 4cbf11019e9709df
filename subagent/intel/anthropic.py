"""The Anthropic Messages API adapter (non-streaming).

Transcript messages become content blocks (text, `tool_use`, `tool_result`), each message's
blocks encoded once and cached; consecutive same-role messages are merged at send time because
the API requires strict user/assistant alternation. `stop_reason == "refusal"` is a refusal.
"""

from __future__ import annotations

from collections.abc import Sequence

import httpx2
from pydantic import JsonValue

from protocol.spawn import EndpointSpec
from subagent.intel.encode_once import EncodeOnceCache, join_array, json_bytes, with_fields
from subagent.intel.endpoint import Prepared, Sent, as_text_turn
from subagent.intel.images import ImageSelection
from subagent.intel.openai import new_call_id
from subagent.intel.replies import arguments_object, object_arguments, with_estimated_usage
from subagent.intel.reply_body import reply_from_body
from subagent.intel.transport import checked_headers, post_json
from subagent.messages import (
    Message,
    ModelReply,
    ModelRequest,
    TokenUsage,
    ToolCall,
    ToolResultMessage,
    ToolSpec,
    UserMessage,
)

API_VERSION = "2023-06-01"
DEFAULT_MAX_TOKENS = 4096
# The API rejects empty text blocks and empty content; an assistant turn that said nothing
# (possible after a malformed reply) is sent as this placeholder instead.
EMPTY_TURN = "(no content)"


def messages_url(base_url: str) -> str:
    """`{base}/v1/messages`, or `{base}/messages` when `base` already ends in `/v1`."""
    base = base_url.rstrip("/")
    return base + "/messages" if base.endswith("/v1") else base + "/v1/messages"


def encode_blocks(message: Message) -> tuple[str, bytes]:
    """A message's kind (`user`, `tool_result`, `assistant`) and its content blocks, encoded
    and comma-joined (no brackets)."""
    if isinstance(message, UserMessage):
        return "user", json_bytes({"type": "text", "text": message.text or EMPTY_TURN})
    if isinstance(message, ToolResultMessage):
        content: JsonValue = message.text
        if message.images:
            parts: list[JsonValue] = [{"type": "text", "text": message.text}]
            for image in message.images:
                source: dict[str, JsonValue] = {
                    "type": "base64",
                    "media_type": image.mime_type,
                    "data": image.data,
                }
                parts.append({"type": "image", "source": source})
            content = parts
        block: dict[str, JsonValue] = {
            "type": "tool_result",
            "tool_use_id": message.call_id,
            "content": content,
        }
        if message.is_error:
            block["is_error"] = True
        return "tool_result", json_bytes(block)
    blocks: list[bytes] = []
    if message.text:
        blocks.append(json_bytes({"type": "text", "text": message.text}))
    for call in message.tool_calls:
        use: dict[str, JsonValue] = {
            "type": "tool_use",
            "id": call.id,
            "name": call.name,
            "input": arguments_object(call),
        }
        blocks.append(json_bytes(use))
    if not blocks:
        blocks.append(json_bytes({"type": "text", "text": EMPTY_TURN}))
    return "assistant", b",".join(blocks)


def merge_turns(encoded: Sequence[tuple[str, bytes]]) -> list[bytes]:
    """Anthropic messages from encoded blocks: runs of the same role become one message.

    Tool results travel in user messages and must open them, so within a merged user message
    the `tool_result` blocks go first (each group keeps its order).
    """
    merged: list[tuple[str, list[tuple[str, bytes]]]] = []
    for kind, blocks in encoded:
        role = "assistant" if kind == "assistant" else "user"
        if merged and merged[-1][0] == role:
            merged[-1][1].append((kind, blocks))
        else:
            merged.append((role, [(kind, blocks)]))
    out: list[bytes] = []
    for role, parts in merged:
        ordered = [b for k, b in parts if k == "tool_result"] + [b for k, b in parts if k != "tool_result"]
        out.append(b'{"role":' + json_bytes(role) + b',"content":[' + b",".join(ordered) + b"]}")
    return out


def encode_tool(tool: ToolSpec) -> bytes:
    return json_bytes({"name": tool.name, "description": tool.description, "input_schema": tool.input_schema})


def parse_message(data: JsonValue) -> ModelReply:
    """A `ModelReply` from a decoded Messages API body (malformed if it has the wrong shape)."""
    if not isinstance(data, dict):
        return ModelReply(malformed="the reply is not a JSON object")
    content = data.get("content")
    if not isinstance(content, list):
        return ModelReply(malformed="the reply has no content list")
    texts: list[str] = []
    calls: list[ToolCall] = []
    for block in content:
        if not isinstance(block, dict):
            return ModelReply(malformed="a content block is not an object")
        kind = block.get("type")
        if kind == "text":
            text = block.get("text")
            if not isinstance(text, str):
                return ModelReply(malformed="a text block has no text")
            texts.append(text)
        elif kind == "tool_use":
            name, call_id = block.get("name"), block.get("id")
            if not isinstance(name, str) or not name:
                return ModelReply(malformed="a tool_use block has no name")
            calls.append(
                object_arguments(
                    call_id if isinstance(call_id, str) else new_call_id(), name, block.get("input")
                )
            )
        # Other block kinds (thinking, server tools) carry nothing the loop acts on.
    stop = data.get("stop_reason")
    stop_reason = stop if isinstance(stop, str) else None
    text = "".join(texts)
    model = data.get("model")
    return ModelReply(
        text=text,
        tool_calls=tuple(calls),
        refusal=(text or "refused") if stop_reason == "refusal" else None,
        usage=parse_usage(data.get("usage")),
        finish_reason=stop_reason,
        model=model if isinstance(model, str) else "",
    )


def parse_usage(value: JsonValue) -> TokenUsage | None:
    """Input tokens (including cache reads and writes, which are billed input) and output tokens."""
    if not isinstance(value, dict):
        return None
    counts = {
        key: item
        for key in ("input_tokens", "cache_creation_input_tokens", "cache_read_input_tokens", "output_tokens")
        if isinstance(item := value.get(key), int) and not isinstance(item, bool)
    }
    if "input_tokens" not in counts or "output_tokens" not in counts:
        return None
    tokens_in = sum(v for k, v in counts.items() if k != "output_tokens")
    cached = counts.get("cache_read_input_tokens", 0)
    return TokenUsage(tokens_in=tokens_in, tokens_out=counts["output_tokens"], cached_in=cached)


class AnthropicMessages:
    """One Anthropic Messages endpoint. `spec.stream` is ignored: requests are non-streaming."""

    def __init__(self, spec: EndpointSpec, client: httpx2.AsyncClient) -> None:
        self._spec = spec
        self._client = client
        self._url = messages_url(spec.base_url or "")
        self._headers = {"content-type": "application/json", "anthropic-version": API_VERSION, **spec.headers}
        if spec.api_key is not None:
            self._headers["x-api-key"] = spec.api_key.get_secret_value()
        self._headers = checked_headers(self._headers)
        # One cache per tool mode: a run that switches to JSON actions re-encodes its history once.
        self._messages: EncodeOnceCache[Message, tuple[str, bytes]] = EncodeOnceCache(encode_blocks)
        self._text_messages: EncodeOnceCache[Message, tuple[str, bytes]] = EncodeOnceCache(
            _encode_text_blocks
        )
        # Images only in native requests; a JSON-action request carries the text placeholder.
        self._images = ImageSelection(enabled=spec.images)
        self._no_images = ImageSelection(enabled=False)
        self._tools: EncodeOnceCache[ToolSpec, bytes] = EncodeOnceCache(encode_tool)

    @property
    def spec(self) -> EndpointSpec:
        return self._spec

    def prepare(self, request: ModelRequest) -> Prepared:
        head: dict[str, JsonValue] = {
            "model": self._spec.model,
            "max_tokens": request.max_output_tokens or self._spec.max_output_tokens or DEFAULT_MAX_TOKENS,
        }
        if self._spec.temperature is not None:
            head["temperature"] = self._spec.temperature
        if request.system:
            head["system"] = request.system
        if request.json_actions:
            cache, messages = self._text_messages, self._no_images.select(request.messages)
        else:
            cache, messages = self._messages, self._images.select(request.messages)
        tail = {"messages": join_array(merge_turns(cache.encode_all(messages)))}
        if request.tools:
            tail["tools"] = join_array(self._tools.encode_all(request.tools))
        body = with_fields(head, tail)
        return Prepared(request=request, payload=body, size_bytes=len(body))

    async def send(self, prepared: Prepared) -> Sent:
        received = await post_json(
            self._client,
            self._url,
            self._headers,
            prepared.payload,
            timeout_s=self._spec.request_timeout_s,
            idle_timeout_s=self._spec.read_idle_timeout_s,
        )
        reply = reply_from_body(received, parse_message)
        if reply.malformed is None:
            reply = with_estimated_usage(reply, prepared.size_bytes)
        return Sent(reply, received.status)


def _encode_text_blocks(message: Message) -> tuple[str, bytes]:
    return encode_blocks(as_text_turn(message))
