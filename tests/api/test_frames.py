"""Parsing a frame is staged, without a socket: envelope, then method, then params, each fault with
its own code, its id once the envelope validated, and a message that never echoes the frame."""

from __future__ import annotations

import pytest

from agentd.api.frames import FrameFault, parse_envelope, parse_request
from protocol.api import ListParams, ListRequest, StatusRequest
from protocol.jsonrpc import INVALID_PARAMS, INVALID_REQUEST, METHOD_NOT_FOUND, PARSE_ERROR, RequestId

CANARY = "CANARY-f00d"
MAX_FRAME = 1024


def _parse(frame: bytes) -> object:
    envelope = parse_envelope(frame, max_frame=MAX_FRAME)
    return envelope if isinstance(envelope, FrameFault) else parse_request(envelope)


@pytest.mark.parametrize(
    ("frame", "expected"),
    [
        pytest.param(
            b'{"jsonrpc":"2.0","id":3,"method":"daemon.status"}', StatusRequest(id=3), id="absent-params"
        ),
        pytest.param(
            b'{"jsonrpc":"2.0","id":"a","method":"task.list","params":{"limit":5}}',
            ListRequest(id="a", params=ListParams(limit=5)),
            id="params",
        ),
    ],
)
def test_a_valid_frame_becomes_its_methods_request(frame: bytes, expected: object) -> None:
    parsed = _parse(frame)
    assert type(parsed) is type(expected)
    assert parsed == expected


@pytest.mark.parametrize(
    ("frame", "request_id", "code", "message"),
    [
        pytest.param(
            b"\xff" + CANARY.encode(), None, PARSE_ERROR, "parse error: invalid UTF-8 at byte 0", id="utf8"
        ),
        pytest.param(
            b'{"' + CANARY.encode(), None, PARSE_ERROR, "parse error: not a JSON document", id="json"
        ),
        pytest.param(
            b"x" * (MAX_FRAME + 1), None, INVALID_REQUEST, "invalid request: line exceeds", id="oversize"
        ),
        pytest.param(
            b'{"jsonrpc":"2.0","method":"daemon.status"}',
            None,
            INVALID_REQUEST,
            "invalid request: 1 validation error(s); first: missing at id",
            id="no-id",
        ),
        pytest.param(
            f'{{"jsonrpc":"2.0","id":1,"method":"{CANARY}","{CANARY}":1}}'.encode(),
            None,
            INVALID_REQUEST,
            "invalid request: 1 validation error(s); first: extra_forbidden at *",
            id="envelope-before-method",
        ),
        pytest.param(
            b'{"jsonrpc":"2.0","id":1,"method":"task.list","params":[1]}',
            None,
            INVALID_REQUEST,
            "invalid request:",
            id="params-not-an-object",
        ),
        pytest.param(
            f'{{"jsonrpc":"2.0","id":7,"method":"{CANARY}"}}'.encode(),
            7,
            METHOD_NOT_FOUND,
            "method not found",
            id="unknown-method",
        ),
        pytest.param(
            b'{"jsonrpc":"2.0","id":"q","method":"task.list","params":{"limit":0}}',
            "q",
            INVALID_PARAMS,
            "invalid params: 1 error(s); first: greater_than_equal at limit",
            id="bad-param",
        ),
        pytest.param(
            f'{{"jsonrpc":"2.0","id":1,"method":"task.get","params":{{"task_id":"t","{CANARY}":1}}}}'.encode(),
            1,
            INVALID_PARAMS,
            "invalid params: 1 error(s); first: extra_forbidden at *",
            id="extra-param-masked",
        ),
        pytest.param(
            f'{{"jsonrpc":"2.0","id":1,"method":"task.submit","params":{{"spec":{{"instruction":"x","labels":{{"{CANARY}":7}}}}}}}}'.encode(),
            1,
            INVALID_PARAMS,
            "invalid params: 1 error(s); first: string_type at spec.labels.*",
            id="nested-key-masked",
        ),
        pytest.param(
            b'{"jsonrpc":"2.0","id":1,"method":"task.get"}',
            1,
            INVALID_PARAMS,
            "invalid params: 1 error(s); first: missing at task_id",
            id="absent-params-of-a-method-that-needs-some",
        ),
    ],
)
def test_each_faulty_frame_gets_its_stage_code_and_a_message_without_its_content(
    frame: bytes, request_id: RequestId | None, code: int, message: str
) -> None:
    fault = _parse(frame)
    assert isinstance(fault, FrameFault)
    assert (fault.id, fault.code) == (request_id, code)
    assert fault.message.startswith(message)
    assert CANARY not in fault.message
