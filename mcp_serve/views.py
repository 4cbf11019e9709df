"""What the server shows of the daemon's answers (pure): tool results as data, resource URIs,
progress lines, and the signature of a task list whose change is announced.

A task's result is always returned as data: structured content, and the same JSON as text,
never text a client would read as its own instructions.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable
from dataclasses import dataclass, field

import mcp_types as types
from pydantic import JsonValue

from protocol.api import EventView, TaskView

SCHEME = "agentd"
APPROVALS_URI = "agentd://approvals"
TASK_TEMPLATE = "agentd://tasks/{task_id}"
RESULT_TEMPLATE = "agentd://tasks/{task_id}/result"
_TASK_URI = re.compile(r"agentd://tasks/(?P<task_id>[A-Za-z0-9_]{1,64})(?P<result>/result)?")


def task_uri(task_id: str) -> str:
    return f"agentd://tasks/{task_id}"


def result_uri(task_id: str) -> str:
    return f"agentd://tasks/{task_id}/result"


def parse_task_uri(uri: str) -> tuple[str, bool] | None:
    """`(task_id, is_result)` for a task's URI, None for any other."""
    match = _TASK_URI.fullmatch(uri)
    if match is None:
        return None
    return match["task_id"], match["result"] is not None


def data_result(structured: dict[str, JsonValue]) -> types.CallToolResult:
    """A successful tool result: the data, structured and as JSON text."""
    return types.CallToolResult(
        content=[types.TextContent(type="text", text=json.dumps(structured, ensure_ascii=False))],
        structured_content=structured,
    )


def refusal(message: str) -> types.CallToolResult:
    """A tool call agentd refused (or could not answer): an error result carrying its message."""
    return types.CallToolResult(content=[types.TextContent(type="text", text=message)], is_error=True)


def view_json(view: TaskView) -> dict[str, JsonValue]:
    value: dict[str, JsonValue] = json.loads(view.model_dump_json())
    return value


def outcome(view: TaskView) -> dict[str, JsonValue]:
    """`run_task`'s structured result."""
    return {
        "task_id": view.task_id,
        "status": view.status,
        "exit_code": view.exit_code,
        "result": view.result,
        "usage": json.loads(view.usage.model_dump_json()),
    }


def submitted(task_id: str) -> dict[str, JsonValue]:
    return {"task_id": task_id, "uri": task_uri(task_id), "result_uri": result_uri(task_id)}


def result_document(view: TaskView) -> dict[str, JsonValue]:
    """What `agentd://tasks/{id}/result` holds: the outcome, and whether it is final yet."""
    return {**outcome(view), "state": view.state, "partial": view.partial}


@dataclass(slots=True)
class ProgressTally:
    """What a running task has done so far, from its events: the lines of `run_task`'s progress.

    Each subagent of the tree (a `handle`) reports its own steps and cumulative tokens; the tally
    sums them, so a nested subagent's work counts in its task's.
    """

    steps: dict[str, int] = field(default_factory=dict)
    tokens: dict[str, int] = field(default_factory=dict)
    tool_calls: int = 0
    reported: int = 0

    def line(self, event: EventView) -> str | None:
        """The progress message this event is worth, else None; counts what it reports."""
        fields = event.fields
        handle = str(fields.get("handle", "0"))
        if event.event == "loop.step":
            self.steps[handle] = _int(fields.get("step"))
            self.tokens[handle] = _int(fields.get("tokens_in")) + _int(fields.get("tokens_out"))
            what = f"step {self.steps[handle]} done" if handle == "0" else f"subagent {handle}: step done"
        elif event.event == "tool.call":
            self.tool_calls += 1
            what = f"tool call {fields.get('tool')}"
        elif event.event == "approval.requested":
            what = f"tool call {fields.get('tool')} waits for approval (approve_call or deny_call)"
        elif event.event == "approval.decided":
            what = f"approval {fields.get('decision')}"
        elif event.event == "subagent.spawn" and handle != "0":
            what = f"subagent {handle} started"
        elif event.event == "subagent.ready" and handle == "0":
            what = "started"
        else:
            return None
        self.reported += 1
        calls = "1 tool call" if self.tool_calls == 1 else f"{self.tool_calls} tool calls"
        total_steps = sum(self.steps.values())
        steps = "1 step" if total_steps == 1 else f"{total_steps} steps"
        return f"{what} · {steps}, {calls}, {sum(self.tokens.values())} tokens"


def _int(value: JsonValue) -> int:
    return value if isinstance(value, int) and not isinstance(value, bool) else 0


def list_signature(views: Iterable[TaskView]) -> frozenset[tuple[str, bool]]:
    """What changes the resource list: a task appearing, going, or ending."""
    return frozenset((view.task_id, view.state == "terminal") for view in views)


def task_resource(view: TaskView) -> types.Resource:
    head = " ".join(view.instruction.split())[:80]
    return types.Resource(
        uri=task_uri(view.task_id),
        name=view.task_id,
        title=f"{view.task_id} ({view.status or view.state}): {head}",
        description=f"agentd task {view.task_id}, {view.status or view.state}",
        mime_type="application/json",
    )
