"""The JSON-RPC 2.0 envelope shared by the control channel (`protocol.control`) and the daemon's
socket API (`protocol.api`).

Owns what a message has whatever its method: the version tag, the request id, responses and error
responses, the standard error codes, and `message_kind`, the discriminator both channels' unions
use to tell a method call (by its `method`) from a response (by `result` / `error`).
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, JsonValue

RequestId = Annotated[int, Field(strict=True, ge=0)] | Annotated[str, Field(max_length=64)]

# The standard error codes (JSON-RPC reserves -32768..-32000 for the protocol itself).
PARSE_ERROR = -32700  # not UTF-8, or not JSON
INVALID_REQUEST = -32600  # JSON, but not a request object
METHOD_NOT_FOUND = -32601
INVALID_PARAMS = -32602
INTERNAL_ERROR = -32603

MAX_ERROR_MESSAGE = 4000  # characters of `ErrorData.message`


class Message(BaseModel):
    """Base of every message: the version tag, and no member the model does not name."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    jsonrpc: Literal["2.0"] = "2.0"


class RequestEnvelope(Message):
    """Any request before its method is known: what a server validates first, so that a broken
    envelope (-32600) is told apart from an unknown method (-32601) and from bad params (-32602).

    An id is required: a message without one would be a notification, which gets no answer.
    """

    jsonrpc: Literal["2.0"]  # required here: a frame must say which protocol it speaks
    id: RequestId
    method: str = Field(max_length=64)
    params: dict[str, JsonValue] | None = None


class Response(Message):
    id: RequestId
    result: JsonValue


class ErrorData(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    code: int
    message: str = Field(max_length=MAX_ERROR_MESSAGE)
    data: JsonValue = None


class ErrorResponse(Message):
    # None: the receiver could not tell which request the error answers (a frame fault).
    id: RequestId | None
    error: ErrorData


def message_kind(value: Any) -> str:
    """A union discriminator: a message's `method`, else `"error"` or `"result"` for a response.

    Called by pydantic both on raw input (a dict) and on a model instance (when serialising).
    A dict that is neither a call nor a response is `"unknown"`, which no union tags.
    """
    if isinstance(value, dict):
        method = value.get("method")
        if isinstance(method, str):
            return method
        if "error" in value:
            return "error"
        if "result" in value:
            return "result"
        return "unknown"
    method = getattr(value, "method", None)
    if isinstance(method, str):
        return method
    return "error" if isinstance(value, ErrorResponse) else "result"
