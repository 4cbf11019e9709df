"""The delegation self-tools: `subagent_spawn`, `subagent_wait`, `subagent_status`, `subagent_cancel`.

They never start a process here: each becomes a `sup/*` request to the supervisor, the single
spawn chokepoint, which mints the child's identity and grant. A refusal (a cap, a wider scope, no
budget, a draining daemon) comes back as a successful response and becomes an `isError`
observation the model can adapt to; the child's outcome arrives as a distillate only.

Arguments are the model's writing too: each request is checked against the control channel's own
model of its parameters before it is sent, so what the model wrote is an error observation here,
never a frame the channel refuses to build (which would end the run).

An output schema is the model's own writing, so it is evaluated here and never by the supervisor:
its validity before the request is sent, and a child's result against it when a distillate comes
back (`schema_valid`, `schema_errors`), by the same `protocol.contract` check the child's VERIFY
gate applied to that result.
"""

from __future__ import annotations

import json
import re
from collections.abc import Awaitable, Callable
from typing import Literal

import anyio
from pydantic import BaseModel, ConfigDict, Field, JsonValue, ValidationError, field_validator

from protocol import control
from protocol.contract import contract_problem, result_errors
from protocol.names import HANDLE_PATTERN
from protocol.spawn import OutputContract
from subagent.messages import JsonObject, ToolOutcome, ToolSpec
from subagent.tracing import current_traceparent

SPAWN = "subagent_spawn"
WAIT = "subagent_wait"
STATUS = "subagent_status"
CANCEL = "subagent_cancel"
TOOLS = (SPAWN, WAIT, STATUS, CANCEL)

Request = Callable[[str, dict[str, JsonValue]], Awaitable[JsonValue]]

# The output schema of each child this subagent spawned with one, by handle: its distillate is
# checked against it, whichever tool (`subagent_spawn` or `subagent_wait`) brings it back.
Schemas = dict[str, dict[str, JsonValue]]


class _Args(BaseModel):
    model_config = ConfigDict(extra="ignore", frozen=True)


class SpawnArgs(_Args):
    instruction: str = Field(min_length=1, max_length=200_000)
    context: str | None = Field(default=None, max_length=200_000)
    output_schema: dict[str, JsonValue] | None = None
    tools: list[str] | None = Field(default=None, max_length=64)
    max_steps: int | None = Field(default=None, ge=1, le=100_000)
    max_tokens: int | None = Field(default=None, ge=1)
    deadline_s: float | None = Field(default=None, gt=0)
    wait: bool = True


class HandleArgs(_Args):
    handle: str = Field(min_length=1, max_length=64)
    timeout_s: float | None = Field(default=None, ge=0)

    @field_validator("handle")
    @classmethod
    def _spawned_handle(cls, value: str) -> str:
        if not _HANDLE_RE.fullmatch(value):
            raise ValueError("not a handle subagent_spawn returned (handles look like 0.1 or 0.1.2)")
        return value


_HANDLE_RE = re.compile(HANDLE_PATTERN)


def _schema(properties: JsonObject, required: list[str]) -> JsonObject:
    needed: list[JsonValue] = list(required)
    return {"type": "object", "properties": properties, "required": needed, "additionalProperties": False}


_HANDLE: JsonObject = {"type": "string", "description": "The child's handle, as subagent_spawn returned it."}

SPECS: tuple[ToolSpec, ...] = (
    ToolSpec(
        SPAWN,
        "Delegate a self-contained part of the task to a new subagent with a clean context. It gets only "
        "your instruction (and optional context), works with a grant carved out of your own budget, and "
        "returns a distillate: {status, result, partial, usage}. With wait=false it runs in the background "
        "and you get its handle; collect it later with subagent_wait.",
        _schema(
            {
                "instruction": {
                    "type": "string",
                    "description": "What the subagent must do, self-contained.",
                },
                "context": {"type": "string", "description": "Facts it needs from your work so far."},
                "output_schema": {"type": "object", "description": "JSON Schema its result must satisfy."},
                "tools": {
                    "type": "array",
                    "items": {"type": "string"},
                    "description": "Your tools it may use: tool names, or server names (default all).",
                },
                "max_steps": {"type": "integer", "description": "Its step budget (capped by yours)."},
                "max_tokens": {"type": "integer", "description": "Its token budget (capped by yours)."},
                "deadline_s": {
                    "type": "number",
                    "description": "Its time limit in seconds (capped by yours).",
                },
                "wait": {"type": "boolean", "description": "Wait for its result (default true)."},
            },
            ["instruction"],
        ),
    ),
    ToolSpec(
        WAIT,
        "Wait for a background subagent and return its distillate (or that it is still running).",
        _schema(
            {"handle": _HANDLE, "timeout_s": {"type": "number", "description": "How long to wait."}},
            ["handle"],
        ),
    ),
    ToolSpec(
        STATUS,
        "The state, usage and grant of one of your subagents.",
        _schema({"handle": _HANDLE}, ["handle"]),
    ),
    ToolSpec(
        CANCEL,
        "Cancel one of your subagents (and everything it started).",
        _schema({"handle": _HANDLE}, ["handle"]),
    ),
)

Method = Literal["sup/spawn", "sup/wait", "sup/status", "sup/cancel"]

# The control channel's model of each request's parameters (protocol/control.py).
_FRAME_PARAMS: dict[Method, type[BaseModel]] = {
    "sup/spawn": control.SpawnRequestParams,
    "sup/wait": control.HandleParams,
    "sup/status": control.HandleParams,
    "sup/cancel": control.HandleParams,
}


def _params(
    tool: str, arguments: JsonObject, canonical: Callable[[str], str], call_id: str | None
) -> tuple[Method, dict[str, JsonValue]]:
    if tool == SPAWN:
        args = SpawnArgs.model_validate(arguments)
        contract: dict[str, JsonValue] = {}
        if args.output_schema is not None:
            contract = {"format": "json", "schema": args.output_schema}
        seed: list[JsonValue] = [{"role": "user", "content": args.context}] if args.context else []
        params: dict[str, JsonValue] = {
            "instruction": args.instruction,
            "output_contract": contract,
            "context_seed": seed,
            # The model names tools as it sees them (`fs__read`); the supervisor by server (`fs/read`).
            "tool_scope": [canonical(t) for t in args.tools] if args.tools is not None else None,
            "limits": {
                "max_steps": args.max_steps,
                "max_tokens": args.max_tokens,
                "deadline_s": args.deadline_s,
            },
            "wait": args.wait,
            # The current span is this call's: the child's run is traced under it (if tracing).
            "traceparent": current_traceparent(),
            "call_id": call_id,
        }
        return "sup/spawn", params
    handle = HandleArgs.model_validate(arguments)
    method: Method = {WAIT: "sup/wait", STATUS: "sup/status", CANCEL: "sup/cancel"}[tool]  # type: ignore[assignment]
    return method, {"handle": handle.handle, "timeout_s": handle.timeout_s}


async def call(
    tool: str,
    arguments: JsonObject,
    request: Request,
    *,
    timeout_s: float,
    canonical: Callable[[str], str] = str,
    schemas: Schemas | None = None,
    call_id: str | None = None,
) -> ToolOutcome:
    """Run one delegation tool through the supervisor; every failure is an observation.

    `schemas` is the caller's record of its children's output schemas (filled by spawns, read
    when a distillate arrives); without it a distillate is passed on unchecked.
    """
    try:
        method, params = _params(tool, arguments, canonical, call_id)
        _FRAME_PARAMS[method].model_validate(params)
    except ValidationError as exc:
        problems = "; ".join(
            f"{'.'.join(str(p) for p in e['loc']) or 'arguments'}: {e['msg']}"
            for e in exc.errors(include_url=False, include_input=False)
        )
        return ToolOutcome(f"invalid arguments for `{tool}`: {problems}", is_error=True)
    schema = _requested_schema(params) if method == "sup/spawn" else None
    if schema is not None:
        problem = contract_problem(OutputContract(format="json", schema_=schema))
        if problem is not None:
            return ToolOutcome(f"`{tool}` refused: {problem}", is_error=True)
    with anyio.move_on_after(timeout_s):
        try:
            response = await request(method, params)
        except (RuntimeError, TimeoutError, ConnectionError) as exc:
            return ToolOutcome(f"`{tool}` failed: {exc}", is_error=True)
        if isinstance(response, dict) and isinstance(response.get("refused"), str):
            return ToolOutcome(f"`{tool}` refused: {response['refused']}", is_error=True)
        if isinstance(response, dict) and schemas is not None:
            handle = response.get("handle")
            if schema is not None and isinstance(handle, str):
                schemas[handle] = schema
            response = check_distillate(response, schemas)
        return ToolOutcome(json.dumps(response, ensure_ascii=False))
    return ToolOutcome(
        f"`{tool}` timed out after {timeout_s:.0f}s (no time left before your deadline)", is_error=True
    )


def _requested_schema(params: dict[str, JsonValue]) -> dict[str, JsonValue] | None:
    contract = params.get("output_contract")
    schema = contract.get("schema") if isinstance(contract, dict) else None
    return schema if isinstance(schema, dict) else None


def check_distillate(response: dict[str, JsonValue], schemas: Schemas) -> dict[str, JsonValue]:
    """A finished child's distillate with `schema_valid` (and `schema_errors`) added, when the
    child was asked for a JSON result with a schema and brought one back; else `response` as is."""
    handle, result = response.get("handle"), response.get("result")
    schema = schemas.get(handle) if isinstance(handle, str) else None
    if schema is None or result is None or "status" not in response:
        return response
    errors = result_errors(result, schema)
    checked: dict[str, JsonValue] = {**response, "schema_valid": not errors}
    if errors:
        checked["schema_errors"] = list(errors)
    return checked
