"""Connecting to Temporal, for the front door and the workers alike."""

from __future__ import annotations

import anyio
from temporalio.api.workflowservice.v1 import DescribeNamespaceRequest
from temporalio.client import Client
from temporalio.service import RPCError

from agentd.errors import ExecutorUnavailable
from agentd.executors.remote import TemporalSettings


async def connect(settings: TemporalSettings, *, identity: str | None = None) -> Client:
    """A client of `settings.target` whose namespace exists; `ExecutorUnavailable` (one line)
    if that cannot be had within `connect_timeout_s`."""
    where = f"Temporal at {settings.target} (namespace {settings.namespace!r})"
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
