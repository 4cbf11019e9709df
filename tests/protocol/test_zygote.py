"""The zygote's messages: each survives a datagram unchanged, fits its cap, and a malformed one is refused."""

from __future__ import annotations

import json
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from pydantic import TypeAdapter

from protocol.framing import FrameError, decode
from protocol.zygote import (
    FROM_ZYGOTE_ADAPTER,
    MAX_ERROR_CHARS,
    MAX_REPLY,
    MAX_REQUEST,
    TO_ZYGOTE_ADAPTER,
    Fork,
    ForkFailed,
    FromZygote,
    encode,
)
from tests.protocol import strategies as s

SECRET = "sk-test-zygote-0123456789"


def _round_trip(message: Fork | FromZygote, adapter: TypeAdapter[Any], max_bytes: int) -> object:
    datagram = encode(message)
    assert b"\n" not in datagram, "SOCK_SEQPACKET keeps boundaries: a datagram needs no delimiter"
    assert len(datagram) <= max_bytes
    return decode(datagram, adapter, max_line=max_bytes)


@settings(max_examples=40, deadline=None)
@given(message=s.forks)
def test_every_fork_request_round_trips_through_a_datagram(message: Fork) -> None:
    assert _round_trip(message, TO_ZYGOTE_ADAPTER, MAX_REQUEST) == message


@pytest.mark.parametrize(
    "messages",
    [
        pytest.param(s.zygote_readies, id="ready"),
        pytest.param(s.start_failures, id="start_failed"),
        pytest.param(s.forkeds, id="forked"),
        pytest.param(s.fork_failures, id="fork_failed"),
    ],
)
@settings(max_examples=40, deadline=None)
@given(data=st.data())
def test_every_message_from_the_zygote_round_trips_through_a_datagram(
    messages: st.SearchStrategy[FromZygote], data: st.DataObject
) -> None:
    message = data.draw(messages)
    assert _round_trip(message, FROM_ZYGOTE_ADAPTER, MAX_REPLY) == message


@pytest.mark.parametrize(
    "char",
    [
        pytest.param("\x00", id="escaped-control"),
        pytest.param('"', id="escaped-quote"),
        pytest.param("\U0010ffff", id="four-byte-utf8"),
    ],
)
def test_the_longest_error_fits_a_reply_however_it_encodes(char: str) -> None:
    message = ForkFailed(id=2**53, error=char * MAX_ERROR_CHARS)
    assert len(encode(message)) <= MAX_REPLY
    assert decode(encode(message), FROM_ZYGOTE_ADAPTER, max_line=MAX_REPLY) == message


FORK: dict[str, Any] = {"type": "fork", "id": 1, "env": {"AGENTD_RUN_MARKER": "r/0"}}


def _json(value: object) -> bytes:
    return json.dumps(value).encode()


@pytest.mark.parametrize(
    ("datagram", "kind"),
    [
        pytest.param(b"not json", "json", id="not-json"),
        pytest.param(b"\xff\xfe", "encoding", id="not-utf8"),
        pytest.param(b" " * (MAX_REQUEST + 1), "oversize", id="oversize"),
        pytest.param(_json([FORK]), "shape", id="not-an-object"),
        pytest.param(_json({**FORK, "extra": 1}), "shape", id="extra-field"),
        pytest.param(_json({**FORK, "id": "1"}), "shape", id="id-as-string"),
        pytest.param(_json({**FORK, "id": 0}), "shape", id="id-zero"),
        pytest.param(_json({**FORK, "env": {"PATH": 1}}), "shape", id="env-value-not-a-string"),
        pytest.param(_json({"type": "fork", "id": 1}), "shape", id="no-env"),
        pytest.param(_json({"type": "ready", "pid": 1}), "shape", id="an-up-message-sent-down"),
    ],
)
def test_a_malformed_fork_request_is_refused(datagram: bytes, kind: str) -> None:
    refused = decode(datagram, TO_ZYGOTE_ADAPTER, max_line=MAX_REQUEST)
    assert isinstance(refused, FrameError)
    assert refused.kind == kind


@pytest.mark.parametrize(
    ("datagram", "kind"),
    [
        pytest.param(b"{", "json", id="truncated"),
        pytest.param(b" " * (MAX_REPLY + 1), "oversize", id="oversize"),
        pytest.param(_json({"type": "forked", "id": 1}), "shape", id="forked-without-pid"),
        pytest.param(_json({"type": "forked", "id": 1, "pid": 0}), "shape", id="pid-zero"),
        pytest.param(_json({"type": "exited", "pid": 7}), "shape", id="unknown-type"),
        pytest.param(_json({"ready": True, "pid": 7}), "shape", id="no-type"),
        pytest.param(
            _json({"type": "start_failed", "error": "x" * (MAX_ERROR_CHARS + 1)}),
            "shape",
            id="error-too-long",
        ),
        pytest.param(_json(FORK), "shape", id="a-down-message-sent-up"),
    ],
)
def test_a_malformed_message_from_the_zygote_is_refused(datagram: bytes, kind: str) -> None:
    refused = decode(datagram, FROM_ZYGOTE_ADAPTER, max_line=MAX_REPLY)
    assert isinstance(refused, FrameError)
    assert refused.kind == kind


def test_a_refused_fork_request_does_not_echo_its_environment() -> None:
    datagram = _json({**FORK, "env": {"API_KEY": SECRET}, SECRET: 1})
    refused = decode(datagram, TO_ZYGOTE_ADAPTER, max_line=MAX_REQUEST)
    assert isinstance(refused, FrameError)
    assert SECRET not in refused.detail
