"""The tools' effects: each call's arguments checked, sent to the daemon, answered as data.

Bad arguments and unknown tools are JSON-RPC errors (`MCPError`, invalid params); whatever the
daemon refuses, or cannot be asked because it is not running, is an `isError` result carrying its
message. `run_task` follows the task's events as progress notifications (and asks the client's
person about calls held for approval), and a cancelled request cancels the task before it lets go.
"""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

import anyio
import mcp_types as types
from anyio.abc import TaskGroup
from mcp.server import ServerRequestContext
from mcp.shared.exceptions import MCPError
from pydantic import BaseModel, JsonValue, ValidationError

from agentd.api.async_port import DaemonPort
from agentd.errors import ApiClientError
from mcp_serve import arguments as a
from mcp_serve.catalogue import BY_NAME
from mcp_serve.elicitation import Asker, can_ask
from mcp_serve.inside import REFUSAL
from mcp_serve.subscriptions import Pulse
from mcp_serve.views import ProgressTally, data_result, outcome, refusal, submitted, view_json
from protocol.api import (
    ApprovalDecideParams,
    ApprovalDecideRequest,
    CancelParams,
    CancelRequest,
    EventView,
    GetRequest,
    ListParams,
    ListRequest,
    Request,
    SubmitParams,
    SubmitRequest,
    TaskRef,
    TaskSpec,
    TaskView,
    TranscriptParams,
    TranscriptRequest,
)

ArgsT = TypeVar("ArgsT", bound=BaseModel)
Context = ServerRequestContext[Any, Any]

# Bound on asking the daemon to cancel a task whose request was cancelled (shielded).
CANCEL_TIMEOUT_S = 10.0
CANCEL_REASON = "the MCP client cancelled the run_task request"


def _parse(model: type[ArgsT], raw: dict[str, Any] | None) -> ArgsT:
    try:
        return model.model_validate(raw or {})
    except ValidationError as exc:
        raise MCPError(types.INVALID_PARAMS, f"invalid arguments: {a.problem(exc)}") from None


def _spec(arguments: a.TaskArguments) -> TaskSpec:
    try:
        return a.task_spec(arguments)
    except ValidationError as exc:
        raise MCPError(types.INVALID_PARAMS, f"invalid arguments: {a.problem(exc)}") from None


class Tools:
    """The eight tools over one daemon."""

    def __init__(self, port: DaemonPort, pulse: Pulse, *, inside_task: bool) -> None:
        self._port = port
        self._pulse = pulse
        self._inside_task = inside_task
        self._handlers: dict[
            str, Callable[[Context, dict[str, Any] | None], Awaitable[types.CallToolResult]]
        ] = {
            "run_task": self._run_task,
            "submit_task": self._submit_task,
            "get_task": self._get_task,
            "cancel_task": self._cancel_task,
            "list_tasks": self._list_tasks,
            "approve_call": self._approve_call,
            "deny_call": self._deny_call,
            "task_transcript": self._task_transcript,
        }
        assert set(self._handlers) == set(BY_NAME)

    async def call(self, ctx: Context, params: types.CallToolRequestParams) -> types.CallToolResult:
        handler = self._handlers.get(params.name)
        if handler is None:
            raise MCPError(types.INVALID_PARAMS, f"unknown tool {params.name!r}; tools/list names the tools")
        return await handler(ctx, params.arguments)

    async def _ask(
        self, request: Request[Any], shape: Callable[[Any], dict[str, JsonValue]]
    ) -> types.CallToolResult:
        try:
            answer = await self._port.call(request)
        except ApiClientError as exc:
            return refusal(str(exc))
        return data_result(shape(answer))

    # ---- starting tasks ------------------------------------------------------------------

    async def _submit(self, arguments: a.TaskArguments, key: str | None) -> str | types.CallToolResult:
        """The new task's id, or the refusal to answer with."""
        if self._inside_task:
            return refusal(REFUSAL)
        request = SubmitRequest(params=SubmitParams(spec=_spec(arguments), idempotency_key=key))
        try:
            # Shielded (the call is bounded by the client's timeout): a request cancelled while its
            # task is being submitted must still learn the task's id, to cancel it.
            with anyio.CancelScope(shield=True):
                answer = await self._port.call(request)
        except ApiClientError as exc:
            return refusal(str(exc))
        self._pulse.poke()
        return answer.task_id

    async def start(self, raw: dict[str, Any] | None) -> str | types.CallToolResult:
        """Start `run_task`'s task without waiting for it: its id, or the refusal to answer with.

        Raises:
            MCPError: bad arguments.
        """
        return await self._submit(_parse(a.TaskArguments, raw), None)

    async def _submit_task(self, ctx: Context, raw: dict[str, Any] | None) -> types.CallToolResult:
        arguments = _parse(a.SubmitArguments, raw)
        task_id = await self._submit(arguments, arguments.idempotency_key)
        return task_id if isinstance(task_id, types.CallToolResult) else data_result(submitted(task_id))

    async def _run_task(self, ctx: Context, raw: dict[str, Any] | None) -> types.CallToolResult:
        task_id = await self._submit(_parse(a.TaskArguments, raw), None)
        if isinstance(task_id, types.CallToolResult):
            return task_id
        try:
            return await self._wait_for_end(ctx, task_id)
        except anyio.get_cancelled_exc_class():
            with anyio.CancelScope(shield=True), anyio.move_on_after(CANCEL_TIMEOUT_S):
                try:
                    await self._port.call(
                        CancelRequest(params=CancelParams(task_id=task_id, reason=CANCEL_REASON))
                    )
                except ApiClientError:
                    pass  # it ended meanwhile, or the daemon is gone: nothing is left to cancel
            raise

    async def _wait_for_end(self, ctx: Context, task_id: str) -> types.CallToolResult:
        async with anyio.create_task_group() as asking:
            result = await self._follow(ctx, task_id, asking)
            asking.cancel_scope.cancel()  # a question still open is moot once the task ended
        return result

    async def _follow(self, ctx: Context, task_id: str, asking: TaskGroup) -> types.CallToolResult:
        """Report the task's progress until its end; ask the client's person about each call it
        holds for approval, when the client can be asked."""
        tally = ProgressTally()
        asker = Asker(ctx.session, ctx.request_id, self._port, task_id) if can_ask(ctx.session) else None
        async with self._port.open_follow(task_id) as items:
            async for item in items:
                if isinstance(item, ApiClientError):
                    return refusal(f"task {task_id}: {item}")
                if isinstance(item, EventView):
                    if asker is not None and item.event == "approval.requested":
                        asking.start_soon(asker.decide, item)
                    message = tally.line(item)
                    if message is not None:
                        await ctx.session.report_progress(tally.reported, None, message)
                    continue
                await ctx.session.report_progress(tally.reported + 1, None, f"ended {item.status}")
                return data_result(outcome(item))
        return refusal(f"task {task_id}: agentd stopped reporting on it; get_task shows where it is")

    # ---- one task, lists, approvals, transcripts -------------------------------------------

    async def _get_task(self, ctx: Context, raw: dict[str, Any] | None) -> types.CallToolResult:
        arguments = _parse(a.TaskRefArguments, raw)
        return await self._ask(GetRequest(params=TaskRef(task_id=arguments.task_id)), view_json)

    async def _cancel_task(self, ctx: Context, raw: dict[str, Any] | None) -> types.CallToolResult:
        arguments = _parse(a.CancelArguments, raw)
        request = CancelRequest(params=CancelParams(task_id=arguments.task_id, reason=arguments.reason))
        return await self._ask(request, view_json)

    async def _list_tasks(self, ctx: Context, raw: dict[str, Any] | None) -> types.CallToolResult:
        arguments = _parse(a.ListArguments, raw)
        params = ListParams(state=arguments.state, limit=arguments.limit, before=arguments.cursor)

        def page(views: list[TaskView]) -> dict[str, JsonValue]:
            full = len(views) == arguments.limit
            return {
                "tasks": [view_json(view) for view in views],
                "next_cursor": views[-1].task_id if full else None,
            }

        return await self._ask(ListRequest(params=params), page)

    async def _approve_call(self, ctx: Context, raw: dict[str, Any] | None) -> types.CallToolResult:
        arguments = _parse(a.ApproveArguments, raw)
        params = ApprovalDecideParams(task_id=arguments.task_id, call=arguments.call, approve=True)
        return await self._ask(ApprovalDecideRequest(params=params), _dumped)

    async def _deny_call(self, ctx: Context, raw: dict[str, Any] | None) -> types.CallToolResult:
        arguments = _parse(a.DenyArguments, raw)
        params = ApprovalDecideParams(
            task_id=arguments.task_id, call=arguments.call, approve=False, reason=arguments.reason
        )
        return await self._ask(ApprovalDecideRequest(params=params), _dumped)

    async def _task_transcript(self, ctx: Context, raw: dict[str, Any] | None) -> types.CallToolResult:
        arguments = _parse(a.TranscriptArguments, raw)
        params = TranscriptParams(
            task_id=arguments.task_id,
            handle=arguments.handle,
            after_seq=arguments.after_seq,
            limit=arguments.limit,
        )
        return await self._ask(TranscriptRequest(params=params), _dumped)


def _dumped(model: BaseModel) -> dict[str, JsonValue]:
    value: dict[str, JsonValue] = json.loads(model.model_dump_json())
    return value
