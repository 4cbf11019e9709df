"""The contract between the failover driver and one endpoint adapter (openai, anthropic, scripted).

An adapter turns a request into its wire payload once per call (`prepare`, reused across
retries) and performs one attempt (`send`). `send` returns a reply — possibly `malformed` — or
raises `IntelTransient` (retry), `IntelFatal` (auth/config), `ContextOverflow`, or
`IntelUnavailable` (the adapter knows retrying is pointless); it never raises a third-party error.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

from protocol.spawn import EndpointSpec
from subagent.intel.replies import arguments_wire
from subagent.messages import (
    AssistantMessage,
    Message,
    ModelReply,
    ModelRequest,
    ToolResultMessage,
    UserMessage,
)


@dataclass(frozen=True, slots=True)
class Prepared:
    """One call's request as an adapter will send it. `size_bytes` is reported in `intel.call`;
    `constrained`: the payload asks the endpoint for the request's response schema."""

    request: ModelRequest
    payload: bytes
    size_bytes: int
    constrained: bool = False


@dataclass(frozen=True, slots=True)
class Sent:
    """One successful attempt: the reply and the HTTP status (None for the scripted model)."""

    reply: ModelReply
    status: int | None


class Endpoint(Protocol):
    @property
    def spec(self) -> EndpointSpec: ...

    def prepare(self, request: ModelRequest) -> Prepared: ...

    async def send(self, prepared: Prepared) -> Sent: ...


def message_chars(message: Message) -> int:
    """Characters of a message as the model reads it (for chars/4 usage estimates)."""
    if isinstance(message, AssistantMessage):
        return len(message.text) + sum(len(c.name) + len(arguments_wire(c)) for c in message.tool_calls)
    if isinstance(message, ToolResultMessage):
        return len(message.text) + len(message.name)
    return len(message.text)


def request_chars(request: ModelRequest) -> int:
    """Characters of the system prompt and every message of `request`."""
    return len(request.system) + sum(message_chars(m) for m in request.messages)


def as_text_turn(message: Message) -> Message:
    """JSON-action mode (no native tool calling): the same turn as plain text.

    The loop keeps parsed JSON actions as tool calls and their observations as tool results; an
    endpoint without tool calling must see neither, so an assistant turn keeps only its text (the
    JSON action it wrote) and a tool result becomes a user message naming the tool.
    """
    if isinstance(message, ToolResultMessage):
        label = " (error)" if message.is_error else ""
        return UserMessage(f"Result of tool `{message.name}`{label}:\n{message.text}", kind="observation")
    if isinstance(message, AssistantMessage) and message.tool_calls:
        return AssistantMessage(message.text)
    return message
