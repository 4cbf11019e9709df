"""Whether a subagent is traced, and its spans while it runs (the `otel` extra; docs/tracing.md).

Off unless the standard `OTEL_*` variables ask for an exporter (the supervisor passes them on)
and the SDK is installed. Then every event the subagent reports also drives its spans
(`subagent/spans.py`): one `invoke_agent` span for the run, a span per turn, and under it a
`chat` span per model call and an `execute_tool` span per tool call, with the OpenTelemetry
GenAI `gen_ai.*` attributes. No prompt, reply or tool payload is recorded unless the task
captures content. The run's span is the child of the spawn payload's `traceparent`, so a task's
spans, its nested subagents' (children of the delegating tool call) and its MCP servers' (the SDK
sends the current span in `_meta`) form one trace.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager

from pydantic import JsonValue

from protocol.events import EventName
from protocol.spawn import SpawnPayload

Observer = Callable[[EventName, dict[str, JsonValue]], None]


def wanted(environ: dict[str, str] | os._Environ[str] = os.environ) -> bool:
    """Whether the standard variables ask for traces: an OTLP endpoint or a traces exporter."""
    if environ.get("OTEL_SDK_DISABLED", "").strip().lower() == "true":
        return False
    exporter = environ.get("OTEL_TRACES_EXPORTER", "").strip().lower()
    if exporter == "none":
        return False
    return bool(
        exporter
        or environ.get("OTEL_EXPORTER_OTLP_ENDPOINT")
        or environ.get("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT")
    )


def warm_imports() -> None:
    """What a traced run imports, for the zygote to import once instead of every child (≈0.2 s
    of CPU per spawn); nothing when traces are off or the extra is missing."""
    if not wanted():
        return
    try:
        from subagent import spans
    except ImportError:
        return
    spans.warm()


def current_traceparent() -> str | None:
    """The W3C `traceparent` of the current span, or None (no SDK, or no span)."""
    try:
        from opentelemetry.propagate import inject
    except ImportError:
        return None
    carrier: dict[str, str] = {}
    inject(carrier)
    return carrier.get("traceparent")


@contextmanager
def tracing(payload: SpawnPayload) -> Iterator[Observer | None]:
    """The run's span driver while the block runs; None when traces are off or the sampler drops
    the run, so that no event does any tracing work. Flushed (at most 3 s) at the end."""
    if not wanted():
        yield None
        return
    try:
        from subagent.spans import Export, SpanDriver, run_context
    except ImportError:
        sys.stderr.write("agentd: OTEL_* asks for traces but the otel extra is not installed\n")
        yield None
        return
    exporter = os.environ.get("OTEL_TRACES_EXPORTER", "otlp").strip().lower() or "otlp"
    if exporter != "otlp":  # stdout is the control channel: no console exporter here
        sys.stderr.write(f"agentd: OTEL_TRACES_EXPORTER={exporter} is not supported; use otlp\n")
        yield None
        return
    export = Export.from_environment("agentd-subagent")
    run = run_context(payload, export.sampler)
    if run is None:
        export.shutdown()
        yield None
        return
    driver = SpanDriver(payload, export, run)
    try:
        yield driver
    finally:
        driver.close()
        export.flush()
