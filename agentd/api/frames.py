"""The API's JSON-RPC 2.0 envelope on the server side: parsing requests, writing frames (DESIGN §9).

Parsing is staged so that every fault gets its own code: bytes → envelope (-32700 parse error,
-32600 invalid request), method (-32601), params (-32602). Every error message names the fault by
position and pydantic error type only; none echoes the frame's content.
"""

from __future__ import annotations

import functools
import json
from collections.abc import Iterator
from typing import Literal, TypeVar, get_args

from pydantic import BaseModel, ConfigDict, Field, JsonValue, TypeAdapter, ValidationError

from protocol.api import EventView
from protocol.framing import FrameError, Oversize, decode, encode
from protocol.jsonrpc import (
    INVALID_REQUEST,
    PARSE_ERROR,
    ErrorData,
    ErrorResponse,
    RequestId,
)

M = TypeVar("M", bound=BaseModel)

MAX_MESSAGE_CHARS = 4000  # ErrorData.message's cap


class ApiRequest(BaseModel):
    """One request frame. An id is required: the API has no notifications from client to daemon."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    jsonrpc: Literal["2.0"]
    id: RequestId
    method: str = Field(max_length=64)
    params: dict[str, JsonValue] | None = None


class EventNotification(BaseModel):
    """A `task.event` notification streamed by `task.events`."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    jsonrpc: Literal["2.0"] = "2.0"
    method: Literal["task.event"] = "task.event"
    params: EventView


class NoParams(BaseModel):
    """Params of a method that takes none (`{}` or absent)."""

    model_config = ConfigDict(extra="forbid", frozen=True)


REQUEST_ADAPTER: TypeAdapter[ApiRequest] = TypeAdapter(ApiRequest)


class InvalidParams(Exception):
    """The params of a known method failed validation; `message` is safe to send."""

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message


def parse_request(line: bytes | Oversize, *, max_frame: int) -> ApiRequest | tuple[int, str]:
    """A request, or the `(code, message)` of the error to answer it with (id null)."""
    request = decode(line, REQUEST_ADAPTER, max_line=max_frame)
    if not isinstance(request, FrameError):
        return request
    if request.kind in ("json", "encoding"):
        return PARSE_ERROR, f"parse error: {request.detail}"
    return INVALID_REQUEST, f"invalid request: {request.detail}"


def parse_params(model: type[M], params: dict[str, JsonValue] | None) -> M:
    """Validate a request's params against the method's model.

    Raises:
        InvalidParams: with a message naming the first fault's type and (masked) location.
    """
    try:
        return model.model_validate(params or {})
    except ValidationError as exc:
        errors = exc.errors(include_url=False, include_input=False, include_context=False)
        first = errors[0]
        known = _field_names(model)
        # A loc segment may be a key the client invented (an extra field, a label): mask it.
        where = ".".join(str(p) if isinstance(p, int) or p in known else "*" for p in first["loc"])
        raise InvalidParams(
            f"invalid params: {len(errors)} error(s); first: {first['type']} at {where or '<root>'}"
        ) from None


def result_frame(request_id: RequestId, result_json: bytes) -> bytes:
    """A response frame around an already-serialised result (serialised once, by its model)."""
    return b'{"jsonrpc":"2.0","id":%b,"result":%b}\n' % (json.dumps(request_id).encode(), result_json)


def error_frame(request_id: RequestId | None, code: int, message: str, *, retryable: bool = False) -> bytes:
    """An error response frame; `data.retryable` tells a client whether to try again."""
    error = ErrorData(code=code, message=message[:MAX_MESSAGE_CHARS], data={"retryable": retryable})
    return encode(ErrorResponse(id=request_id, error=error))


def event_frame(event: EventView) -> bytes:
    """A `task.event` notification frame."""
    return encode(EventNotification(params=event))


@functools.cache
def _field_names(model: type[BaseModel]) -> frozenset[str]:
    """Every field name and alias reachable from `model` (safe to echo in an error location)."""
    names: set[str] = set()
    pending, seen = [model], {model}
    while pending:
        current = pending.pop()
        for name, field in current.model_fields.items():
            names.add(name)
            if field.alias:
                names.add(field.alias)
            for sub in _models_in(field.annotation):
                if sub not in seen:
                    seen.add(sub)
                    pending.append(sub)
    return frozenset(names)


def _models_in(annotation: object) -> Iterator[type[BaseModel]]:
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        yield annotation
    for arg in get_args(annotation):
        yield from _models_in(arg)
