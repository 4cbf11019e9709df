"""The HTTP error table: which status and body is which intel error."""

from __future__ import annotations

import json

import pytest
from pydantic import JsonValue

from subagent.errors import ContextOverflow, IntelError, IntelFatal, IntelTransient
from subagent.intel.classify import classify_status, error_detail

OPENAI_OVERFLOW: JsonValue = {
    "error": {
        "message": "This model's maximum context length is 8192 tokens.",
        "code": "context_length_exceeded",
    }
}
ANTHROPIC_OVERFLOW: JsonValue = {
    "type": "error",
    "error": {
        "type": "invalid_request_error",
        "message": "prompt is too long: 210000 tokens > 200000 maximum",
    },
}
VLLM_OVERFLOW: JsonValue = {
    "object": "error",
    "message": "This model's maximum context length is 4096 tokens.",
}
LLAMACPP_OVERFLOW: JsonValue = {
    "error": {"code": 400, "type": "exceed_context_size_error", "message": "too big"}
}
BAD_MODEL: JsonValue = {"error": {"message": "The model `nope` does not exist", "code": "model_not_found"}}


def body(value: JsonValue) -> bytes:
    return json.dumps(value).encode()


@pytest.mark.parametrize(
    ("status", "payload", "expected"),
    [
        pytest.param(401, b"", IntelFatal, id="401-auth"),
        pytest.param(403, b"", IntelFatal, id="403-auth"),
        pytest.param(429, b"", IntelTransient, id="429-rate-limit"),
        pytest.param(408, b"", IntelTransient, id="408"),
        pytest.param(409, b"", IntelTransient, id="409"),
        pytest.param(500, b"", IntelTransient, id="500"),
        pytest.param(502, b"", IntelTransient, id="502"),
        pytest.param(503, b"", IntelTransient, id="503"),
        pytest.param(504, b"", IntelTransient, id="504"),
        pytest.param(529, b"", IntelTransient, id="529-overloaded"),
        pytest.param(400, body(OPENAI_OVERFLOW), ContextOverflow, id="openai-context-length"),
        pytest.param(400, body(ANTHROPIC_OVERFLOW), ContextOverflow, id="anthropic-prompt-too-long"),
        pytest.param(400, body(VLLM_OVERFLOW), ContextOverflow, id="vllm-maximum-context-length"),
        pytest.param(400, body(LLAMACPP_OVERFLOW), ContextOverflow, id="llamacpp-exceed-context-size"),
        pytest.param(413, b"context length exceeded", ContextOverflow, id="413-plain-text"),
        pytest.param(400, body(BAD_MODEL), IntelFatal, id="other-400-is-config"),
        pytest.param(404, b"", IntelFatal, id="404-is-config"),
        pytest.param(422, b"not json", IntelFatal, id="422-is-config"),
    ],
)
def test_status_and_body_map_to_the_error_class(
    status: int, payload: bytes, expected: type[IntelError]
) -> None:
    error = classify_status(status, payload)
    assert isinstance(error, expected)
    # Overflow is its own class, never a fatal or transient one.
    assert isinstance(error, ContextOverflow) == (expected is ContextOverflow)


def test_rate_limit_carries_retry_after_and_status() -> None:
    error = classify_status(429, b"", retry_after_s=2.5)
    assert isinstance(error, IntelTransient)
    assert (error.retry_after_s, error.status) == (2.5, 429)


def test_auth_failure_message_never_echoes_the_body() -> None:
    leaky = body({"error": {"message": "Incorrect API key provided: sk-secret123"}})
    assert "sk-secret" not in str(classify_status(401, leaky))


def test_rejected_request_names_the_provider_code_and_message() -> None:
    assert str(classify_status(400, body(BAD_MODEL))) == (
        "request rejected (HTTP 400): model_not_found The model `nope` does not exist"
    )


def test_error_detail_is_capped_and_single_line() -> None:
    detail = error_detail(body({"error": {"message": "line\n" * 200}}))
    assert "\n" not in detail
    assert len(detail) <= 200


def test_an_error_body_nested_too_deep_to_decode_is_classified_not_raised() -> None:
    error = classify_status(400, b"[" * 65536)
    assert isinstance(error, IntelFatal)
    assert str(error) == "request rejected (HTTP 400)"
