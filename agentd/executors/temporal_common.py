"""Connecting to Temporal, for the front door and the workers alike."""

from __future__ import annotations

import logging

import anyio
from temporalio.api.workflowservice.v1 import DescribeNamespaceRequest
from temporalio.client import Client
from temporalio.runtime import Runtime, TelemetryConfig
from temporalio.service import RPCError

from agentd import logs
from agentd.errors import ExecutorUnavailable
from agentd.executors.remote import TemporalSettings


class _ToEvents(logging.Handler):
    """The SDK's own warnings as `executor.error` log lines, not free text on stderr."""

    def emit(self, record: logging.LogRecord) -> None:
        logs.get().warning("executor.error", op="sdk", err=" ".join(record.getMessage().split())[:300])


def route_sdk_logs() -> None:
    """Keep every log line JSON: the native core logs nothing itself (its RPC retries surface as
    errors that agentd logs), and the Python SDK's warnings become `executor.error` lines."""
    Runtime.set_default(Runtime(telemetry=TelemetryConfig(logging=None)), error_if_already_set=False)
    sdk = logging.getLogger("temporalio")
    sdk.handlers[:] = [_ToEvents()]
    sdk.propagate = False
    sdk.setLevel(logging.WARNING)


async def connect(settings: TemporalSettings, *, identity: str | None = None) -> Client:
    """A client of `settings.target` whose namespace exists; `ExecutorUnavailable` (one line)
    if that cannot be had within `connect_timeout_s`."""
    where = f"Temporal at {settings.target} (namespace {settings.namespace!r})"
    route_sdk_logs()
    try:
        with anyio.fail_after(settings.connect_timeout_s):
            client = (
                await Client.connect(settings.target, namespace=settings.namespace, identity=identity)
                if identity is not None
                else await Client.connect(settings.target, namespace=settings.namespace)
            )
            await client.workflow_service.describe_namespace(
                DescribeNamespaceRequest(namespace=settings.namespace)
            )
    except TimeoutError:
        raise ExecutorUnavailable(f"{where} did not answer within {settings.connect_timeout_s:g}s") from None
    except (RPCError, RuntimeError, OSError) as exc:
        raise ExecutorUnavailable(f"{where} is unusable: {_one_line(exc)}") from None
    return client


def _one_line(exc: BaseException) -> str:
    text = str(exc) or type(exc).__name__
    return " ".join(text.split())[:300]
