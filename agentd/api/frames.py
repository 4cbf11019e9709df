"""The API's JSON-RPC 2.0 frames on the server side: parsing requests, writing answers (docs/design.md §9).

Parsing is staged so that every fault gets its own code: bytes → envelope (-32700 parse error,
-32600 invalid request), method (-32601), params through `protocol.api.REQUEST_ADAPTER` (-32602).
A fault is returned as a value; its message names the fault by position and pydantic error type
only, never echoing the frame's content.
"""

from __future__ import annotations

import functools
import json
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any, get_args

from pydantic import BaseModel, TypeAdapter, ValidationError

from protocol.api import (
    REQUEST_ADAPTER,
    REQUEST_TYPES,
    ApiRequest,
    EventNotification,
    EventView,
    Request,
    TaskChangedNotification,
    TaskView,
)
from protocol.framing import FrameError, decode, encode
from protocol.jsonrpc import (
    INVALID_PARAMS,
    INVALID_REQUEST,
    MAX_ERROR_MESSAGE,
    METHOD_NOT_FOUND,
    PARSE_ERROR,
    ErrorData,
    ErrorResponse,
    RequestEnvelope,
    RequestId,
)

ENVELOPE_ADAPTER: TypeAdapter[RequestEnvelope] = TypeAdapter(RequestEnvelope)


@dataclass(frozen=True, slots=True)
class FrameFault:
    """A frame that cannot be answered with a result: the error to answer it with instead."""

    id: RequestId | None  # None until the envelope validated
    code: int
    message: str  # safe to send: never echoes the frame


def parse_envelope(line: bytes, *, max_frame: int) -> RequestEnvelope | FrameFault:
    """The frame's JSON-RPC envelope, or the parse error / invalid request it is (id null)."""
    envelope = decode(line, ENVELOPE_ADAPTER, max_line=max_frame)
    if not isinstance(envelope, FrameError):
        return envelope
    if envelope.kind in ("json", "encoding"):
        return FrameFault(None, PARSE_ERROR, f"parse error: {envelope.detail}")
    return FrameFault(None, INVALID_REQUEST, f"invalid request: {envelope.detail}")


def parse_request(envelope: RequestEnvelope) -> ApiRequest | FrameFault:
    """The typed request an envelope carries, or its unknown method / invalid params fault."""
    request_type = REQUEST_TYPES.get(envelope.method)
    if request_type is None:
        return FrameFault(envelope.id, METHOD_NOT_FOUND, "method not found")
    # Absent params are empty params: a method whose params all have defaults needs none.
    frame = {"jsonrpc": envelope.jsonrpc, "id": envelope.id, "method": envelope.method}
    try:
        return REQUEST_ADAPTER.validate_python({**frame, "params": envelope.params or {}})
    except ValidationError as exc:
        return FrameFault(envelope.id, INVALID_PARAMS, _invalid_params_message(exc, request_type))


def _invalid_params_message(exc: ValidationError, request_type: type[Request[Any]]) -> str:
    """The first fault's pydantic type and its location inside `params`, unknown keys masked."""
    errors = exc.errors(include_url=False, include_input=False, include_context=False)
    first = errors[0]
    # The union reports (method tag, "params", ...); the envelope around params already validated.
    loc = first["loc"][2:] if first["loc"][1:2] == ("params",) else first["loc"][1:]
    known = _params_field_names(request_type)
    # A loc segment may be a key the client invented (an extra field, a label): mask it.
    where = ".".join(str(p) if isinstance(p, int) or p in known else "*" for p in loc)
    return f"invalid params: {len(errors)} error(s); first: {first['type']} at {where or '<root>'}"


def result_frame(request_id: RequestId, result_json: bytes) -> bytes:
    """A response frame around an already-serialised result (serialised once, by its adapter)."""
    return b'{"jsonrpc":"2.0","id":%b,"result":%b}\n' % (json.dumps(request_id).encode(), result_json)


def error_frame(request_id: RequestId | None, code: int, message: str, *, retryable: bool = False) -> bytes:
    """An error response frame; `data.retryable` tells a client whether to try again."""
    error = ErrorData(code=code, message=message[:MAX_ERROR_MESSAGE], data={"retryable": retryable})
    return encode(ErrorResponse(id=request_id, error=error))


def event_frame(event: EventView) -> bytes:
    """A `task.event` notification frame."""
    return encode(EventNotification(params=event))


def task_changed_frame(view: TaskView) -> bytes:
    """A `task.changed` notification frame."""
    return encode(TaskChangedNotification(params=view))


@functools.cache
def _params_field_names(request_type: type[Request[Any]]) -> frozenset[str]:
    """Every field name and alias reachable from a request's params (safe to echo in a location)."""
    names: set[str] = set()
    pending = list(_models_in(request_type.model_fields["params"].annotation))
    seen = set(pending)
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
