"""The task's workflow: one activity that runs the task on a worker, under a retry policy.

Retry policy (docs/temporal.md): an attempt is retried on another worker when its worker is
lost (no heartbeat within `heartbeat_timeout_s`), when its child crashed (`agentd.retryable`),
or when its worker handed it back while draining; never when it reached any other
terminal status. `maximum_attempts` is the task's `retry.max_attempts`. The whole task — every
attempt — must end within its deadline (`schedule_to_close`), plus a grace for the kill ladder.

The workers journal each node's steps as `agentd.steps` signals: they stay in this workflow's
history, where the next attempt reads them to resume the task from its last journaled step. The
workflow keeps nothing of them in its own state.

Deterministic and small: no I/O, no clock but `workflow.now()`, so it runs unsandboxed.
"""

from __future__ import annotations

import asyncio
from datetime import timedelta
from typing import Any

from temporalio import workflow
from temporalio.common import RetryPolicy
from temporalio.exceptions import ActivityError, ApplicationError, CancelledError, TimeoutType
from temporalio.exceptions import TimeoutError as TemporalTimeout

from agentd.executors.remote import ACTIVITY_NAME, RETRYABLE_TYPE, STEPS_SIGNAL, WORKFLOW_NAME


def _outcome(status: str, kind: str, message: str) -> dict[str, Any]:
    return {"status": status, "error": {"kind": kind, "message": message[:500]}}


@workflow.defn(name=WORKFLOW_NAME, sandboxed=False)
class TaskWorkflow:
    @workflow.run
    async def run(self, task: dict[str, Any]) -> dict[str, Any]:
        deadline_s = float(task["deadline_s"])
        grace = timedelta(seconds=float(task["grace_s"]))
        arg = {**task, "deadline_at": workflow.now().timestamp() + deadline_s}
        try:
            result: dict[str, Any] = await workflow.execute_activity(
                ACTIVITY_NAME,
                arg,
                schedule_to_close_timeout=timedelta(seconds=deadline_s) + grace,
                heartbeat_timeout=timedelta(seconds=float(task["heartbeat_timeout_s"])),
                retry_policy=RetryPolicy(
                    initial_interval=timedelta(seconds=0.5),
                    backoff_coefficient=2.0,
                    maximum_interval=timedelta(seconds=10),
                    maximum_attempts=int(task["max_attempts"]),
                ),
                cancellation_type=workflow.ActivityCancellationType.WAIT_CANCELLATION_COMPLETED,
            )
            return result
        except ActivityError as exc:
            return _failure(exc)
        except asyncio.CancelledError:
            return _outcome("cancelled", "cancelled", "the task was cancelled")

    @workflow.signal(name=STEPS_SIGNAL)
    def steps(self, batch: dict[str, Any]) -> None:
        """A node's journaled steps: their record is the history event itself."""


def _failure(exc: ActivityError) -> dict[str, Any]:
    """The task's result when its last attempt failed rather than returned."""
    cause = exc.cause
    if isinstance(cause, ApplicationError) and cause.type == RETRYABLE_TYPE and cause.details:
        last = cause.details[0]
        if isinstance(last, dict):
            return last  # the last attempt's own result (a crashed child), attempts spent
    if isinstance(cause, TemporalTimeout):
        if cause.type is TimeoutType.HEARTBEAT:
            return _outcome("crashed", "worker_lost", "the worker running the task stopped heartbeating")
        return _outcome("deadline", "deadline", "the task's deadline passed before any worker finished it")
    if isinstance(cause, CancelledError):
        return _outcome("cancelled", "cancelled", "the task was cancelled")
    return _outcome("crashed", "worker", f"the task's activity failed: {cause or exc}")
