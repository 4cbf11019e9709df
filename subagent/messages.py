"""The in-process vocabulary shared by the loop, the model adapters and the tool layer.

Frozen, slotted dataclasses: a transcript is a tuple of these, shared between loop states, and
an adapter may cache each message's wire encoding by identity because a message never changes.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal

from pydantic import JsonValue

JsonObject = dict[str, JsonValue]


@dataclass(frozen=True, slots=True)
class ToolCall:
    """One tool call the model asked for. `name` is the wire name the model used."""

    id: str
    name: str
    # Invariant: exactly one of `arguments` / `arguments_error` is set.
    arguments: JsonObject | None
    arguments_error: str | None = None
    raw_arguments: str = ""


@dataclass(frozen=True, slots=True)
class UserMessage:
    text: str
    kind: Literal["instruction", "seed", "observation", "summary", "inject"] = "instruction"


@dataclass(frozen=True, slots=True)
class AssistantMessage:
    text: str
    tool_calls: tuple[ToolCall, ...] = ()


@dataclass(frozen=True, slots=True)
class ImagePart:
    """An image a tool returned (base64 `data`); sent only to endpoints that accept images."""

    mime_type: str
    data: str

    @property
    def size_bytes(self) -> int:
        """Decoded size, from the base64 length (never decoded here)."""
        return len(self.data.rstrip("=")) * 3 // 4


@dataclass(frozen=True, slots=True)
class ToolResultMessage:
    """The observation for one tool call, as the model will read it."""

    call_id: str
    name: str
    text: str
    is_error: bool = False
    # Set when lever 1 replaced the body with a stub; the original is gone from the transcript.
    stubbed: bool = False
    # Images that go with `text` (which still describes each as a placeholder).
    images: tuple[ImagePart, ...] = ()


Message = UserMessage | AssistantMessage | ToolResultMessage


@dataclass(frozen=True, slots=True)
class ToolSpec:
    """A tool as offered to the model: wire name (`^[A-Za-z0-9_-]{1,64}$`), description, schema."""

    name: str
    description: str
    input_schema: JsonObject


@dataclass(frozen=True, slots=True)
class ResponseSchema:
    """A JSON Schema the reply's text must satisfy (constrained decoding), where the endpoint
    supports it. `strict` asks for OpenAI's strict mode; it is set only for schemas inside
    strict mode's subset (loop/constrain.py)."""

    name: str
    schema: JsonObject
    strict: bool = False


@dataclass(frozen=True, slots=True)
class ModelRequest:
    """One model call. `tools` is empty in JSON-action mode (the catalogue is in `system`), and
    `json_actions` tells the adapter to send earlier tool turns as plain text. `response_schema`
    asks the endpoint to constrain the reply's text to a schema (an adapter that cannot ignores
    it; one whose server rejects it is asked again without it, intel/failover.py)."""

    system: str
    messages: tuple[Message, ...]
    tools: tuple[ToolSpec, ...] = ()
    # "wrap_up": the last call of a run whose budget ran out, tools disabled (loop/wrapup.py).
    purpose: Literal["turn", "compact", "wrap_up"] = "turn"
    max_output_tokens: int | None = None
    json_actions: bool = False
    response_schema: ResponseSchema | None = None


@dataclass(frozen=True, slots=True)
class TokenUsage:
    tokens_in: int
    tokens_out: int
    # Of `tokens_in`, those the provider's prompt cache served (billed at its cached price).
    cached_in: int = 0
    # The provider reported none: these are agentd's estimates from sizes (a cost counts at its
    # maximum then). Where the counts came from, not what they are: not compared.
    estimated: bool = field(default=False, compare=False)


@dataclass(frozen=True, slots=True)
class ModelReply:
    """What a model call produced.

    `refusal` is the provider's structured refusal (OpenAI `message.refusal`, Anthropic
    `stop_reason == "refusal"`, a content filter); `malformed` describes a reply the adapter
    could not parse at all — the loop turns it into an observation, never a crash.
    `unparsed_tool_call` marks a malformed reply the *server* reported: it could not parse its
    own model's output as a tool call (an `auto` tool mode then switches to JSON actions).
    """

    text: str = ""
    tool_calls: tuple[ToolCall, ...] = ()
    refusal: str | None = None
    usage: TokenUsage | None = None
    finish_reason: str | None = None
    model: str = ""
    malformed: str | None = None
    unparsed_tool_call: bool = False
    # The configured endpoint that answered (its price applies); None for a replayed reply.
    # Provenance, not content: two replies with the same content are equal wherever they came from.
    endpoint: str | None = field(default=None, compare=False)


@dataclass(frozen=True, slots=True)
class ToolOutcome:
    """The result of executing one tool call: text for the model, and whether it is an error."""

    text: str
    is_error: bool = False
    images: tuple[ImagePart, ...] = ()


CHARS_PER_TOKEN = 4


def estimate_tokens(chars: int) -> int:
    """The one chars/4 token estimate (docs/loop.md, "Usage and the token estimate"), used wherever
    a provider reports no usage and to size a request before it is sent; at least 1 (a call always
    costs something)."""
    return max(1, chars // CHARS_PER_TOKEN)


def unoffered_text(name: str, ungranted: frozenset[str]) -> str:
    """The observation for a call of a tool that was not offered: one a granted server lists
    outside this agent's grant, or one that does not exist at all (a guess, a typo, a tool of a
    server that is gone)."""
    if name in ungranted:
        return f"tool `{name}` is not in this agent's granted scope"
    return f"no such tool `{name}`: it was not run; call one of the tools offered"
