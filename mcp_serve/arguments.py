"""What each tool takes, as pydantic models, and how a task's arguments become a `TaskSpec` (pure).

The models give the tools their input schemas (written for a model to read) and check a call's
arguments; a call the models refuse is a JSON-RPC invalid-params error naming the argument. A spec
the daemon refuses later (an unknown model, a quota) is the daemon's business, not checked here.
"""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import BaseModel, ConfigDict, Field, JsonValue, ValidationError

from protocol.api import SpecLimits, TaskSpec
from protocol.contract import OutputContract
from protocol.names import Handle

TaskId = Annotated[
    str,
    Field(min_length=1, max_length=64, description="The task's id (as returned by run_task or submit_task)."),
]


class _Arguments(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class TaskArguments(_Arguments):
    """The input of `run_task` and `submit_task`."""

    instruction: str = Field(
        min_length=1, max_length=1_000_000, description="What the agent should do, in plain words."
    )
    model: str | None = Field(
        default=None, description="A model name configured in the agentd daemon (default: its default model)."
    )
    mcp_servers: list[str] = Field(
        default_factory=list,
        max_length=64,
        description="Names of MCP servers configured in the agentd daemon that the task may use.",
    )
    max_steps: int | None = Field(default=None, ge=1, description="Most model turns the task may take.")
    max_tokens: int | None = Field(default=None, ge=1, description="Most tokens the task may spend.")
    deadline_s: float | None = Field(
        default=None, gt=0, description="Wall-clock limit in seconds; the task ends `deadline` after it."
    )
    output_schema: dict[str, JsonValue] | None = Field(
        default=None, description="A JSON Schema the task's result must satisfy (the result is then JSON)."
    )


class SubmitArguments(TaskArguments):
    idempotency_key: str | None = Field(
        default=None,
        min_length=1,
        max_length=128,
        description="Submitting again with the same key returns the same task instead of a new one.",
    )


class TaskRefArguments(_Arguments):
    task_id: TaskId


class CancelArguments(_Arguments):
    task_id: TaskId
    reason: str = Field(
        default="cancelled by the MCP client", max_length=1000, description="Why (journaled)."
    )


class ListArguments(_Arguments):
    state: Literal["queued", "starting", "running", "terminal"] | None = Field(
        default=None, description="Only tasks in this state."
    )
    limit: int = Field(default=20, ge=1, le=200, description="Tasks per page, newest first.")
    cursor: str | None = Field(
        default=None, min_length=1, max_length=64, description="The next_cursor of the previous page."
    )


class ApproveArguments(_Arguments):
    task_id: TaskId
    call: str | None = Field(
        default=None,
        min_length=1,
        max_length=64,
        description="The waiting call's id (agentd://approvals lists them); optional when the task has one.",
    )


class DenyArguments(ApproveArguments):
    reason: str = Field(min_length=1, max_length=1000, description="Why; the task's model is told.")


class TranscriptArguments(_Arguments):
    task_id: TaskId
    handle: Handle = Field(default="0", description="A subagent's handle (0.1, 0.1.2, …); 0 is the root.")
    after_seq: int = Field(
        default=0, ge=0, description="Only steps after this one (the previous page's next_seq)."
    )
    limit: int = Field(default=50, ge=1, le=500, description="Steps per page.")


def task_spec(arguments: TaskArguments) -> TaskSpec:
    """The spec a task's arguments ask for.

    Raises:
        pydantic.ValidationError: the arguments break one of the spec's own bounds.
    """
    contract = (
        OutputContract(format="json", schema_=arguments.output_schema)
        if arguments.output_schema is not None
        else OutputContract()
    )
    return TaskSpec(
        instruction=arguments.instruction,
        model=arguments.model,
        mcp=list(arguments.mcp_servers),
        limits=SpecLimits(
            max_steps=arguments.max_steps, max_tokens=arguments.max_tokens, deadline_s=arguments.deadline_s
        ),
        output_contract=contract,
    )


def problem(exc: ValidationError) -> str:
    """A refused call's arguments in one line, each problem naming its argument."""
    parts = []
    for error in exc.errors(include_url=False):
        where = ".".join(str(part) for part in error["loc"]) or "arguments"
        parts.append(f"{where}: {error['msg']}")
    return "; ".join(parts)
