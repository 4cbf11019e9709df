"""Traces off and on without a daemon: when the `OTEL_*` variables turn them on, what a subagent
inherits, and the daemon's task span (exported to the SDK's in-memory exporter)."""

from __future__ import annotations

import pytest
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from agentd import tracing
from agentd.spawning.spawner import SpawnRequest, child_environment
from subagent import tracing as child_tracing


@pytest.mark.parametrize(
    ("environ", "on"),
    [
        pytest.param({}, False, id="nothing-set"),
        pytest.param({"OTEL_EXPORTER_OTLP_ENDPOINT": "http://127.0.0.1:4318"}, True, id="an-endpoint"),
        pytest.param(
            {"OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": "http://c/v1/traces"}, True, id="a-traces-endpoint"
        ),
        pytest.param({"OTEL_TRACES_EXPORTER": "otlp"}, True, id="an-exporter"),
        pytest.param(
            {"OTEL_TRACES_EXPORTER": "none", "OTEL_EXPORTER_OTLP_ENDPOINT": "http://x"}, False, id="none"
        ),
        pytest.param(
            {"OTEL_SDK_DISABLED": "true", "OTEL_EXPORTER_OTLP_ENDPOINT": "http://x"}, False, id="disabled"
        ),
    ],
)
def test_the_standard_variables_decide(environ: dict[str, str], on: bool) -> None:
    assert tracing.wanted(environ) is on
    assert child_tracing.wanted(environ) is on
    assert (tracing.from_environment(environ) is tracing.NULL_TRACING) is not on


def test_an_exporter_other_than_otlp_is_refused_by_name() -> None:
    with pytest.raises(ValueError, match=r"OTEL_TRACES_EXPORTER=console: only otlp"):
        tracing.from_environment({"OTEL_TRACES_EXPORTER": "console"})


def test_a_subagent_inherits_the_otel_variables_and_nothing_else_new() -> None:
    base = {
        "PATH": "/bin",
        "OTEL_EXPORTER_OTLP_ENDPOINT": "http://127.0.0.1:4318",
        "OTEL_SERVICE_NAME": "svc",
        "OPENAI_API_KEY": "sk-secret",
        "NOTIFY_SOCKET": "/run/notify",
    }
    env = child_environment(SpawnRequest(task_id="t", run_id="r", handle="0"), base)
    assert env["OTEL_EXPORTER_OTLP_ENDPOINT"] == "http://127.0.0.1:4318"
    assert env["OTEL_SERVICE_NAME"] == "svc"
    assert "OPENAI_API_KEY" not in env
    assert "NOTIFY_SOCKET" not in env


def test_the_daemon_task_span_carries_its_traceparent_and_outcome() -> None:
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    span = tracing.OtelTracing(provider).start_task("t_1", "r_1", 1)
    assert span.traceparent is not None
    version, trace_id, span_id, _flags = span.traceparent.split("-")
    assert version == "00"
    span.end("exhausted_tokens", 7)
    (finished,) = exporter.get_finished_spans()
    assert finished.name == "agentd.task"
    assert f"{finished.context.trace_id:032x}" == trace_id
    assert f"{finished.context.span_id:016x}" == span_id
    assert finished.attributes is not None
    assert dict(finished.attributes) == {
        "agentd.task_id": "t_1",
        "agentd.run_id": "r_1",
        "agentd.attempt": 1,
        "agentd.status": "exhausted_tokens",
        "agentd.exit_code": 7,
    }
    assert not finished.status.is_ok


def test_without_traces_a_subagent_reports_no_traceparent_of_its_own() -> None:
    assert child_tracing.current_traceparent() is None
