"""The OpenAI-compatible chat-completions adapter (OpenAI, vLLM, Ollama, llama.cpp, LiteLLM, …).

It builds each request body by joining cached per-message bytes (a turn costs its new
messages), sends it with or without streaming, and parses the reply. When the server reports
no usage, tokens are estimated as request bytes / 4 in and reply characters / 4 out.
"""

from __future__ import annotations

import secrets

import httpx2
from pydantic import JsonValue

from protocol.spawn import EndpointSpec
from subagent.errors import IntelTransient
from subagent.intel.encode_once import EncodeOnceCache, join_array, with_fields
from subagent.intel.endpoint import Prepared, Sent, as_text_turn
from subagent.intel.images import ImageSelection
from subagent.intel.openai_stream import ChatStream
from subagent.intel.openai_wire import (
    encode_image_turn,
    encode_message,
    encode_system,
    encode_tool,
    parse_completion,
    response_format,
    with_image_turns,
)
from subagent.intel.replies import with_estimated_usage
from subagent.intel.reply_body import Received, reply_from_body
from subagent.intel.transport import checked_headers, post_json, post_sse
from subagent.messages import Message, ModelReply, ModelRequest, ToolResultMessage, ToolSpec


def new_call_id() -> str:
    """An id for a tool call the server sent without one (ids must be unique in a transcript)."""
    return f"call_{secrets.token_hex(8)}"


class OpenAIChat:
    """One OpenAI-compatible endpoint. Not safe for concurrent `prepare` calls (one loop, one caller)."""

    def __init__(self, spec: EndpointSpec, client: httpx2.AsyncClient) -> None:
        self._spec = spec
        self._client = client
        self._url = (spec.base_url or "").rstrip("/") + "/chat/completions"
        self._headers = {"content-type": "application/json", **spec.headers}
        if spec.api_key is not None:
            self._headers["authorization"] = f"Bearer {spec.api_key.get_secret_value()}"
        if spec.stream:
            self._headers["accept"] = "text/event-stream"
        self._headers = checked_headers(self._headers)
        # One cache per tool mode: a run that switches to JSON actions re-encodes its history once.
        self._messages: EncodeOnceCache[Message, bytes] = EncodeOnceCache(encode_message)
        self._text_messages: EncodeOnceCache[Message, bytes] = EncodeOnceCache(_encode_text_turn)
        # Images only in native requests; a JSON-action request carries the text placeholder.
        self._images = ImageSelection(enabled=spec.images)
        self._no_images = ImageSelection(enabled=False)
        self._image_turns: EncodeOnceCache[ToolResultMessage, bytes] = EncodeOnceCache(encode_image_turn)
        self._tools: EncodeOnceCache[ToolSpec, bytes] = EncodeOnceCache(encode_tool)
        self._system: tuple[str, bytes] | None = None

    @property
    def spec(self) -> EndpointSpec:
        return self._spec

    def prepare(self, request: ModelRequest) -> Prepared:
        """The request body, built from cached message encodings."""
        head: dict[str, JsonValue] = {"model": self._spec.model}
        max_tokens = request.max_output_tokens or self._spec.max_output_tokens
        if max_tokens is not None:
            head["max_tokens"] = max_tokens
        if self._spec.temperature is not None:
            head["temperature"] = self._spec.temperature
        if self._spec.stream:
            head["stream"] = True
            head["stream_options"] = {"include_usage": True}
        if request.tools:
            head["tool_choice"] = "auto"
        if request.response_schema is not None:
            head["response_format"] = response_format(request.response_schema)
        if request.json_actions:
            messages = self._text_messages.encode_all(self._no_images.select(request.messages))
        else:
            selected = self._images.select(request.messages)
            messages = with_image_turns(selected, self._messages.encode_all(selected), self._image_turns)
        if request.system:
            messages.insert(0, self._system_bytes(request.system))
        tail = {"messages": join_array(messages)}
        if request.tools:
            tail["tools"] = join_array(self._tools.encode_all(request.tools))
        body = with_fields(head, tail)
        constrained = request.response_schema is not None
        return Prepared(request=request, payload=body, size_bytes=len(body), constrained=constrained)

    def _system_bytes(self, system: str) -> bytes:
        # The system prompt rarely changes within a run; re-encode only when it does.
        if self._system is None or self._system[0] != system:
            self._system = (system, encode_system(system))
        return self._system[1]

    async def send(self, prepared: Prepared) -> Sent:
        """One attempt; raises the intel error tree, returns malformed replies as values."""
        if self._spec.stream:
            return await self._send_streaming(prepared)
        received = await post_json(
            self._client,
            self._url,
            self._headers,
            prepared.payload,
            timeout_s=self._spec.request_timeout_s,
            idle_timeout_s=self._spec.read_idle_timeout_s,
            constrained=prepared.constrained,
        )
        return self._parse_body(received, prepared)

    def _parse_body(self, received: Received, prepared: Prepared) -> Sent:
        reply = reply_from_body(received, lambda data: parse_completion(data, new_call_id))
        return Sent(self._finish(reply, prepared), received.status)

    async def _send_streaming(self, prepared: Prepared) -> Sent:
        stream = ChatStream(new_call_id)
        streamed = await post_sse(
            self._client,
            self._url,
            self._headers,
            prepared.payload,
            first_token_timeout_s=self._spec.first_token_timeout_s,
            idle_timeout_s=self._spec.stream_idle_timeout_s,
            on_event=stream.on_event,
            constrained=prepared.constrained,
        )
        if streamed.plain is not None:
            return self._parse_body(streamed.plain, prepared)
        if streamed.problem is not None:
            return Sent(ModelReply(malformed=streamed.problem), streamed.status)
        if stream.server_error is not None and stream.unparsed_tool_call:
            malformed = f"the server could not parse the model's tool call: {stream.server_error}"
            return Sent(ModelReply(malformed=malformed, unparsed_tool_call=True), streamed.status)
        if stream.server_error is not None:
            raise IntelTransient(stream.server_error, status=streamed.status)
        if stream.problem is None and not stream.complete:
            raise IntelTransient("the stream ended before the reply was complete", status=streamed.status)
        return Sent(self._finish(stream.reply(), prepared), streamed.status)

    def _finish(self, reply: ModelReply, prepared: Prepared) -> ModelReply:
        if reply.malformed is not None:
            return reply
        return with_estimated_usage(reply, prepared.size_bytes)


def _encode_text_turn(message: Message) -> bytes:
    return encode_message(as_text_turn(message))
