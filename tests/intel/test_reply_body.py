"""The reply-body checks (pure): strict JSON decoding, the size cap, the content type."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st
from pydantic import JsonValue

from subagent.intel.reply_body import (
    MAX_BODY_BYTES,
    BodyCap,
    NotJson,
    Received,
    decode_json,
    is_json_content_type,
    reply_from_body,
)
from subagent.messages import ModelReply


@pytest.mark.parametrize(
    ("data", "decoded"),
    [
        pytest.param(b'{"a": [1, 2.5, null]}', {"a": [1, 2.5, None]}, id="object"),
        pytest.param('"text"', "text", id="str-input"),
        pytest.param(b"{oops", NotJson("JSONDecodeError"), id="syntax-error"),
        pytest.param(b"", NotJson("JSONDecodeError"), id="empty"),
        pytest.param(b"[NaN]", NotJson("ValueError"), id="nan-rejected"),
        pytest.param(b'{"x": -Infinity}', NotJson("ValueError"), id="infinity-rejected"),
        pytest.param(b'"\xff"', NotJson("UnicodeDecodeError"), id="not-utf8"),
        pytest.param(b"[" * 100_000, NotJson("RecursionError"), id="nested-too-deep"),
    ],
)
def test_decode_json_returns_the_value_or_why_not_and_never_raises(
    data: str | bytes, decoded: JsonValue | NotJson
) -> None:
    assert decode_json(data) == decoded


def _parse_as_text(data: JsonValue) -> ModelReply:
    return ModelReply(text=f"parsed {data!r}")


@pytest.mark.parametrize(
    ("received", "reply"),
    [
        pytest.param(Received(200, b'"hi"'), ModelReply(text="parsed 'hi'"), id="json-is-parsed"),
        pytest.param(
            Received(200, b"", oversized=True),
            ModelReply(malformed=f"the reply body exceeds {MAX_BODY_BYTES} bytes"),
            id="oversized",
        ),
        pytest.param(
            Received(200, b"<html>"), ModelReply(malformed="the reply body is not JSON"), id="not-json"
        ),
        pytest.param(Received(200, b"[NaN]"), ModelReply(malformed="the reply body is not JSON"), id="nan"),
    ],
)
def test_a_body_becomes_the_parsed_reply_or_a_malformed_one(received: Received, reply: ModelReply) -> None:
    assert reply_from_body(received, _parse_as_text) == reply


@pytest.mark.parametrize(
    ("content_type", "is_json"),
    [
        pytest.param("application/json", True, id="json"),
        pytest.param("application/json; charset=utf-8", True, id="json-with-charset"),
        pytest.param("text/event-stream", False, id="sse"),
        pytest.param("", False, id="missing"),
    ],
)
def test_only_a_json_content_type_counts_as_a_plain_body(content_type: str, is_json: bool) -> None:
    assert is_json_content_type(content_type) is is_json


@given(
    chunks=st.lists(st.binary(max_size=40), max_size=12),
    limit=st.integers(min_value=0, max_value=200),
    keep=st.integers(min_value=0, max_value=200),
)
def test_a_body_cap_keeps_the_head_and_says_exactly_when_the_limit_is_passed(
    chunks: list[bytes], limit: int, keep: int
) -> None:
    cap = BodyCap(limit, keep_bytes=keep)
    seen = b""
    for chunk in chunks:
        seen += chunk
        assert cap.take(chunk) is (len(seen) <= limit)
    assert cap.size == len(seen)
    assert cap.head == seen[:keep]
    assert cap.head_full is (len(seen) >= keep)
