"""MCP task handles for agentd tasks (pure): which status a task shows, and the wire shapes of a
handle in both protocol eras — the 2025-11-25 `tasks` utility and the 2026-07-28
`io.modelcontextprotocol/tasks` extension.

A handle's `taskId` is the agentd task id itself, so a handle stays good for as long as the daemon
keeps the task (a restart of `agentd mcp serve` changes nothing), and the daemon's ownership rule
decides who may read or cancel it.
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import UTC, datetime
from typing import Any, Literal

from pydantic import JsonValue

from protocol.api import TaskView

EXTENSION = "io.modelcontextprotocol/tasks"
RELATED_TASK_META = "io.modelcontextprotocol/related-task"
# What a client is told to wait between two `tasks/get`.
POLL_INTERVAL_MS = 500
# The tool a client may ask to run as a task; the other tools answer at once.
TASK_TOOL = "run_task"

Era = Literal["2025-11-25", "2026-07-28"]
Status = Literal["working", "input_required", "completed", "failed", "cancelled"]

_WAITING_MESSAGES = {
    "awaiting_approval": "a tool call waits for a person's decision: approve_call or deny_call "
    "(agentd://approvals lists it)",
    "awaiting_budget": "the budget ran out and the task is paused: `agentd extend` lets it go on",
}


def status_of(view: TaskView) -> Status:
    """The MCP status of an agentd task: a live task works, or waits on a person (an approval,
    a budget to extend); a terminal one completed, was cancelled, or failed in one of agentd's
    other named ways."""
    if view.state in _WAITING_MESSAGES:
        return "input_required"
    if view.state != "terminal":
        return "working"
    if view.status == "completed":
        return "completed"
    if view.status == "cancelled":
        return "cancelled"
    return "failed"


def status_message(view: TaskView) -> str:
    """One line on where the task is: its progress while it runs, how it ended once it did."""
    waiting = _WAITING_MESSAGES.get(view.state)
    if waiting is not None:
        return waiting
    usage = view.usage
    done = f"{usage.steps} steps, {usage.tool_calls} tool calls, {usage.tokens} tokens"
    if view.state == "terminal":
        return f"ended {view.status} after {done}"
    return f"{view.state}: {done}"


def _iso(ts: float) -> str:
    return datetime.fromtimestamp(ts, UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z")


def _last_update(view: TaskView) -> float:
    return view.ended_at or view.started_at or view.created_at


def legacy_task(view: TaskView) -> dict[str, JsonValue]:
    """The 2025-11-25 `Task`: what `tasks/get` and `tasks/cancel` answer, and what a
    `CreateTaskResult` carries. `ttl` is null: agentd keeps the task as long as its journal does."""
    return {
        "taskId": view.task_id,
        "status": status_of(view),
        "statusMessage": status_message(view),
        "createdAt": _iso(view.created_at),
        "lastUpdatedAt": _iso(_last_update(view)),
        "ttl": None,
        "pollInterval": POLL_INTERVAL_MS,
    }


def modern_task(view: TaskView, result: Mapping[str, Any] | None) -> dict[str, JsonValue]:
    """The 2026-07-28 extension's `Task`; once the task ended it carries `result` (the tool's
    result, as `run_task` answers it) or, for a failure, `error` (with that result as data)."""
    task: dict[str, JsonValue] = {
        "taskId": view.task_id,
        "status": status_of(view),
        "statusMessage": status_message(view),
        "createdAt": _iso(view.created_at),
        "lastUpdatedAt": _iso(_last_update(view)),
        "ttlMs": None,
        "pollIntervalMs": POLL_INTERVAL_MS,
    }
    if result is None or view.state != "terminal":
        return task
    if task["status"] == "failed":
        task["error"] = {"code": -32603, "message": status_message(view), "data": dict(result)}
    else:
        task["result"] = dict(result)
    return task


def created(view: TaskView, era: Era) -> dict[str, JsonValue]:
    """The answer to a `tools/call` that became a task."""
    if era == "2025-11-25":
        return {"task": legacy_task(view)}
    return {"resultType": "task", **modern_task(view, None)}


def wants_task(
    params: Mapping[str, Any] | None, *, modern: bool, extensions: Mapping[str, Any] | None
) -> bool:
    """Whether a `tools/call` asks for a task handle: a 2025-11-25 request carries `task`, a
    2026-07-28 client declares the extension in the request's capabilities. Only `run_task`
    becomes a task."""
    if params is None or params.get("name") != TASK_TOOL:
        return False
    if modern:
        return extensions is not None and EXTENSION in extensions
    return params.get("task") is not None
