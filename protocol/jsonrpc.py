"""The JSON-RPC 2.0 envelope shared by the control channel (`protocol.control`) and the daemon's
socket API (`protocol.api`).

Owns what a message has whatever its method: the version tag, the request id, responses and error
responses, the standard error codes, and `message_kind`, the discriminator both channels' unions
use to tell a method call (by its `method`) from a response (by `result` / `error`). The codes and
`message_kind` are defined in `protocol.envelope`, without pydantic, and re-exported here.
"""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import BaseModel, ConfigDict, Field, JsonValue

from protocol.envelope import INTERNAL_ERROR as INTERNAL_ERROR
from protocol.envelope import INVALID_PARAMS as INVALID_PARAMS
from protocol.envelope import INVALID_REQUEST as INVALID_REQUEST
from protocol.envelope import METHOD_NOT_FOUND as METHOD_NOT_FOUND
from protocol.envelope import PARSE_ERROR as PARSE_ERROR
from protocol.envelope import message_kind as message_kind

RequestId = Annotated[int, Field(strict=True, ge=0)] | Annotated[str, Field(max_length=64)]

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
