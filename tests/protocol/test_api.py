"""The daemon API's contract: every method's request survives a frame and comes back through the
`method`-discriminated union as itself, every result through its request's adapter, and the union
refuses unknown methods and bad params. Results keep the wire shape they always had."""

from __future__ import annotations

import json
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from pydantic import TypeAdapter, ValidationError

from protocol import framing
from protocol.api import (
    EVENT_NOTIFICATION,
    METHODS,
    REPLY_ADAPTER,
    REQUEST_ADAPTER,
    REQUEST_TYPES,
    DaemonStatus,
    EventNotification,
    GetRequest,
    NodeView,
    Request,
    StatusRequest,
    SubmitParams,
    SubmitRequest,
    SubmitResult,
    TaskRef,
    TaskSpec,
    TaskView,
)
from protocol.jsonrpc import ErrorResponse, Response
from tests.protocol import api_strategies as a
from tests.protocol import strategies as s

METHOD_IDS = sorted(a.METHOD_STRATEGIES)


def test_the_union_has_one_request_type_per_method_and_each_names_its_method() -> None:
    assert set(a.METHOD_STRATEGIES) == METHODS == set(REQUEST_TYPES)
    for method, request_type in REQUEST_TYPES.items():
        assert request_type.model_fields["method"].default == method
    assert EVENT_NOTIFICATION == "task.event"


@pytest.mark.parametrize(
    ("method", "result_type"),
    [
        pytest.param("task.submit", SubmitResult, id="task.submit"),
        pytest.param("task.get", TaskView, id="task.get"),
        pytest.param("task.list", list[TaskView], id="task.list"),
        pytest.param("task.cancel", TaskView, id="task.cancel"),
        pytest.param("task.wait", TaskView, id="task.wait"),
        pytest.param("task.events", TaskView, id="task.events"),
        pytest.param("task.tree", list[NodeView], id="task.tree"),
        pytest.param("daemon.status", DaemonStatus, id="daemon.status"),
    ],
)
def test_each_method_is_answered_with_its_result_type(method: str, result_type: Any) -> None:
    adapter = REQUEST_TYPES[method].result_adapter
    assert adapter.json_schema() == TypeAdapter(result_type).json_schema()


@pytest.mark.parametrize("method", METHOD_IDS)
@settings(max_examples=40, deadline=None)
@given(data=st.data())
def test_every_request_round_trips_through_a_frame_and_the_union(method: str, data: st.DataObject) -> None:
    requests, _ = a.METHOD_STRATEGIES[method]
    request = data.draw(requests)
    line = framing.encode(request)
    assert line.count(b"\n") == 1, "a frame is exactly one line"
    decoded = framing.decode(line[:-1], REQUEST_ADAPTER)
    assert type(decoded) is type(request)
    assert decoded == request


@pytest.mark.parametrize("method", METHOD_IDS)
@settings(max_examples=40, deadline=None)
@given(data=st.data())
def test_every_result_round_trips_through_its_requests_adapter(method: str, data: st.DataObject) -> None:
    requests, results = a.METHOD_STRATEGIES[method]
    request: Request[Any] = data.draw(requests)
    result = data.draw(results)
    wire = request.dump_result(result)
    assert request.validate_result(json.loads(wire)) == result


@pytest.mark.parametrize("method", METHOD_IDS)
@settings(max_examples=25, deadline=None)
@given(data=st.data())
def test_a_result_goes_on_the_wire_as_its_models_own_json(method: str, data: st.DataObject) -> None:
    """The bytes the server always sent: `model_dump_json()` of the result (of each item, in a list)."""
    requests, results = a.METHOD_STRATEGIES[method]
    request: Request[Any] = data.draw(requests)
    result = data.draw(results)
    if isinstance(result, list):
        expected = b"[" + b",".join(item.model_dump_json().encode() for item in result) + b"]"
    else:
        expected = result.model_dump_json().encode()
    assert request.dump_result(result) == expected


def test_a_request_and_a_result_keep_their_wire_bytes() -> None:
    submit = SubmitRequest(id=1, params=SubmitParams(spec=TaskSpec(instruction="x")))
    assert framing.encode(submit) == (
        b'{"jsonrpc":"2.0","id":1,"method":"task.submit","params":{"spec":{"instruction":"x",'
        b'"model":null,"mcp":[],"limits":{"max_steps":null,"max_tokens":null,"deadline_s":null,"max_cost":null},'
        b'"output_contract":{"objective":null,"format":"text","schema":null,"success_criteria":[]},'
        b'"loop":{"repeat_cap":null,"idle_limit":null,"keep_verbatim":null,"compaction_high_water":null,'
        b'"vacuous_reasks":null,"catalogue_bytes":null},"retry":{"max_attempts":2},"labels":{},"approve":[],'
        b'"on_budget":null},"idempotency_key":null}}\n'
    )
    status = DaemonStatus(
        pid=7,
        version="0.1.0",
        uptime_s=1.5,
        draining=False,
        queued=0,
        running=1,
        max_concurrent_tasks=4,
        journal_ok=True,
    )
    assert StatusRequest().dump_result(status) == (
        b'{"pid":7,"version":"0.1.0","uptime_s":1.5,"draining":false,"queued":0,"running":1,'
        b'"max_concurrent_tasks":4,"journal_ok":true,"degraded":[],"children":0,"scope":"daemon",'
        b'"zygote":"off","triggers":{},"failed_triggers":[]}'
    )


def test_absent_params_default_only_where_every_param_has_a_default() -> None:
    assert REQUEST_ADAPTER.validate_python({"jsonrpc": "2.0", "id": 1, "method": "daemon.status"}) == (
        StatusRequest(id=1)
    )
    with pytest.raises(ValidationError) as missing:
        REQUEST_ADAPTER.validate_python({"jsonrpc": "2.0", "id": 1, "method": "task.get"})
    assert [e["loc"] for e in missing.value.errors()] == [("task.get", "params")]


def test_an_unknown_method_is_refused_by_the_union_as_an_unknown_tag() -> None:
    with pytest.raises(ValidationError) as refused:
        REQUEST_ADAPTER.validate_python({"jsonrpc": "2.0", "id": 1, "method": "task.nope", "params": {}})
    assert [e["type"] for e in refused.value.errors()] == ["union_tag_invalid"]


@pytest.mark.parametrize(
    ("frame", "error_type", "loc"),
    [
        pytest.param(
            {"method": "task.list", "params": {"limit": 0}},
            "greater_than_equal",
            ("task.list", "params", "limit"),
            id="below-minimum",
        ),
        pytest.param(
            {"method": "task.get", "params": {"task_id": "t1", "extra": 1}},
            "extra_forbidden",
            ("task.get", "params", "extra"),
            id="extra-param",
        ),
        pytest.param(
            {"method": "task.submit", "params": {"spec": {"instruction": ""}}},
            "string_too_short",
            ("task.submit", "params", "spec", "instruction"),
            id="nested",
        ),
        pytest.param(
            {"method": "daemon.status", "params": {"x": 1}},
            "extra_forbidden",
            ("daemon.status", "params", "x"),
            id="no-params",
        ),
    ],
)
def test_bad_params_are_refused_at_their_location_under_the_method(
    frame: dict[str, Any], error_type: str, loc: tuple[str, ...]
) -> None:
    with pytest.raises(ValidationError) as refused:
        REQUEST_ADAPTER.validate_python({"jsonrpc": "2.0", "id": 1, **frame})
    (error,) = refused.value.errors()
    assert (error["type"], error["loc"]) == (error_type, loc)


@settings(max_examples=40, deadline=None)
@given(reply=st.builds(EventNotification, params=a.event_views) | s.responses | s.error_responses)
def test_every_reply_round_trips_through_the_reply_union(
    reply: EventNotification | Response | ErrorResponse,
) -> None:
    decoded = framing.decode(framing.encode(reply)[:-1], REPLY_ADAPTER)
    assert type(decoded) is type(reply)
    assert decoded == reply


@pytest.mark.parametrize(
    "message",
    [
        pytest.param({"jsonrpc": "2.0", "id": 1}, id="neither"),
        pytest.param({"jsonrpc": "2.0", "method": "task.get", "params": {}}, id="a-request"),
        pytest.param({"jsonrpc": "2.0", "id": 1, "error": {"code": "x", "message": "m"}}, id="bad-error"),
    ],
)
def test_the_reply_union_refuses_what_no_daemon_sends(message: dict[str, Any]) -> None:
    with pytest.raises(ValidationError):
        REPLY_ADAPTER.validate_python(message)


def test_a_result_of_the_wrong_shape_is_a_validation_error() -> None:
    with pytest.raises(ValidationError):
        GetRequest(params=TaskRef(task_id="t1")).validate_result({"task_id": "t1"})
