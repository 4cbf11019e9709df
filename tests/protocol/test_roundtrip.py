"""Every control-channel message survives `encode` → `decode` unchanged, in its direction."""

from __future__ import annotations

import json
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from pydantic import BaseModel, TypeAdapter

from protocol import framing
from protocol.control import DOWN_ADAPTER, MAX_NOTES_PER_FRAME, UP_ADAPTER, Ping, PingParams, Spawn
from protocol.framing import FrameError, decode
from protocol.spawn import REVEAL_SECRETS
from tests.protocol import strategies as s

DOWN = pytest.param(DOWN_ADAPTER, id="down")
UP = pytest.param(UP_ADAPTER, id="up")


def _round_trip(message: BaseModel, adapter: TypeAdapter[Any], **encode_kwargs: Any) -> object:
    line = framing.encode(message, **encode_kwargs)
    assert line.endswith(b"\n")
    assert line.count(b"\n") == 1, "a frame is exactly one line"
    return framing.decode(line[:-1], adapter)


@pytest.mark.parametrize(
    "messages",
    [
        pytest.param(s.pings, id="ctrl/ping"),
        pytest.param(s.cancels, id="ctrl/cancel"),
        pytest.param(s.injects, id="ctrl/inject"),
        pytest.param(s.responses, id="response"),
        pytest.param(s.error_responses, id="error-response"),
    ],
)
@settings(max_examples=40, deadline=None)
@given(data=st.data())
def test_every_down_message_round_trips_through_a_frame(
    messages: st.SearchStrategy[BaseModel], data: st.DataObject
) -> None:
    message = data.draw(messages)
    assert _round_trip(message, DOWN_ADAPTER) == message


@settings(max_examples=30, deadline=None)
@given(message=s.spawns)
def test_spawn_round_trips_with_its_secrets_when_encoded_revealing_them(message: Spawn) -> None:
    assert _round_trip(message, DOWN_ADAPTER, context=REVEAL_SECRETS) == message


@pytest.mark.parametrize(
    "messages",
    [
        pytest.param(s.readies, id="ev/ready"),
        pytest.param(s.events, id="ev/event"),
        pytest.param(s.usages, id="ev/usage"),
        pytest.param(s.batches, id="ev/batch"),
        pytest.param(s.turns, id="ev/turn"),
        pytest.param(s.results, id="ev/result"),
        pytest.param(s.sup_spawns, id="sup/spawn"),
        pytest.param(s.sup_waits, id="sup/wait"),
        pytest.param(s.sup_statuses, id="sup/status"),
        pytest.param(s.sup_cancels, id="sup/cancel"),
        pytest.param(s.responses, id="response"),
        pytest.param(s.error_responses, id="error-response"),
    ],
)
@settings(max_examples=40, deadline=None)
@given(data=st.data())
def test_every_up_message_round_trips_through_a_frame(
    messages: st.SearchStrategy[BaseModel], data: st.DataObject
) -> None:
    message = data.draw(messages)
    assert _round_trip(message, UP_ADAPTER) == message


@pytest.mark.parametrize(
    ("messages", "adapter"),
    [
        pytest.param(s.spawns, UP_ADAPTER, id="ctrl/spawn-up"),
        pytest.param(s.pings, UP_ADAPTER, id="ctrl/ping-up"),
        pytest.param(s.injects, UP_ADAPTER, id="ctrl/inject-up"),
        pytest.param(s.readies, DOWN_ADAPTER, id="ev/ready-down"),
        pytest.param(s.results, DOWN_ADAPTER, id="ev/result-down"),
        pytest.param(s.sup_spawns, DOWN_ADAPTER, id="sup/spawn-down"),
    ],
)
@settings(max_examples=10, deadline=None)
@given(data=st.data())
def test_a_message_sent_in_the_wrong_direction_is_a_shape_error(
    messages: st.SearchStrategy[BaseModel], adapter: TypeAdapter[Any], data: st.DataObject
) -> None:
    decoded = _round_trip(data.draw(messages), adapter, context=REVEAL_SECRETS)
    assert isinstance(decoded, framing.FrameError)
    assert decoded.kind == "shape"


@settings(max_examples=30, deadline=None)
@given(message=st.one_of(s.pings, s.results, s.events, s.responses))
def test_an_encoded_frame_is_one_json_object_speaking_jsonrpc_2_0(message: BaseModel) -> None:
    document = json.loads(framing.encode(message))
    assert isinstance(document, dict)
    assert document["jsonrpc"] == "2.0"


def test_an_encoded_frame_is_compact_json() -> None:
    line = framing.encode(Ping(id=7, params=PingParams(seq=1)))
    assert line == b'{"jsonrpc":"2.0","id":7,"method":"ctrl/ping","params":{"seq":1}}\n'


def test_a_batch_over_the_notes_cap_is_a_shape_fault_naming_where() -> None:
    events = [{"event": "loop.step", "fields": {}}] * (MAX_NOTES_PER_FRAME + 1)
    line = json.dumps({"jsonrpc": "2.0", "method": "ev/batch", "params": {"events": events}}).encode()
    error = decode(line, UP_ADAPTER)
    assert isinstance(error, FrameError)
    assert (error.kind, error.detail) == (
        "shape",
        "1 validation error(s); first: too_long at ev/batch.params.events",
    )
