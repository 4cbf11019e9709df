"""The MCP task methods over agentd tasks: a `run_task` call that asked for a task handle starts
the task and answers at once; `tasks/get`, `tasks/result`, `tasks/list` and `tasks/cancel` ask
the daemon about it by its id.

The SDK serves neither era's task methods, so they are plain request handlers of ours; the handle
itself is answered from a server middleware, because the SDK checks every 2025-11-25 `tools/call`
result against `CallToolResult` (docs/decisions.md, "MCP task handles").
"""

from __future__ import annotations

from typing import Any, TypeVar

import mcp_types as types
from mcp.server import ServerRequestContext
from mcp.shared.exceptions import MCPError
from mcp_types.version import MODERN_PROTOCOL_VERSIONS
from pydantic import JsonValue

from agentd.api.async_port import DaemonPort
from agentd.errors import ApiClientError
from mcp_serve.task_handles import RELATED_TASK_META, created, legacy_task, modern_task, wants_task
from mcp_serve.tools import Tools
from mcp_serve.views import data_result, outcome
from protocol.api import (
    NOT_FOUND,
    CancelParams,
    CancelRequest,
    GetRequest,
    ListParams,
    ListRequest,
    Request,
    TaskRef,
    TaskView,
    WaitParams,
    WaitRequest,
)

Context = ServerRequestContext[Any, Any]
ResultT = TypeVar("ResultT")

CANCEL_REASON = "the MCP client cancelled the task (tasks/cancel)"
# How long `tasks/cancel` waits for the task to end before it answers with where it is.
CANCEL_WAIT_S = 10.0
# One `task.wait` of `tasks/result` (within the port's call timeout); it waits again until the
# task ends or the client gives up.
RESULT_WAIT_S = 20.0
LIST_PAGE = 50


def _modern(ctx: Context) -> bool:
    return ctx.protocol_version in MODERN_PROTOCOL_VERSIONS


def asks_for_task(ctx: Context) -> bool:
    """Whether this request is a `tools/call` whose client wants a task handle for it."""
    if ctx.method != "tools/call" or ctx.request_id is None:
        return False
    capabilities = ctx.session.client_capabilities
    extensions = capabilities.extensions if capabilities is not None else None
    return wants_task(ctx.params, modern=_modern(ctx), extensions=extensions)


class TaskMethods:
    """The task methods over one daemon."""

    def __init__(self, port: DaemonPort, tools: Tools) -> None:
        self._port = port
        self._tools = tools

    async def create(self, ctx: Context) -> dict[str, JsonValue] | types.CallToolResult:
        """Start `run_task`'s task and answer with its handle (or with the refusal)."""
        params = types.CallToolRequestParams.model_validate(ctx.params or {})
        task_id = await self._tools.start(params.arguments)
        if isinstance(task_id, types.CallToolResult):
            return task_id
        view = await self._view(task_id)
        return created(view, "2026-07-28" if _modern(ctx) else "2025-11-25")

    async def get(self, ctx: Context, params: types.GetTaskRequestParams) -> dict[str, JsonValue]:
        view = await self._view(params.task_id)
        if not _modern(ctx):
            return legacy_task(view)
        result = data_result(outcome(view)).model_dump(by_alias=True, mode="json", exclude_none=True)
        return modern_task(view, result if view.state == "terminal" else None)

    async def result(self, ctx: Context, params: types.GetTaskPayloadRequestParams) -> dict[str, Any]:
        """What `run_task` would have answered, once the task ended (waiting for that)."""
        view = await self._view(params.task_id)
        while view.state != "terminal":
            view = await self._call(
                WaitRequest(params=WaitParams(task_id=view.task_id, timeout_s=RESULT_WAIT_S))
            )
        answer = data_result(outcome(view)).model_dump(by_alias=True, mode="json", exclude_none=True)
        answer["_meta"] = {RELATED_TASK_META: {"taskId": view.task_id}}
        return answer

    async def cancel(self, ctx: Context, params: types.CancelTaskRequestParams) -> dict[str, JsonValue]:
        view = await self._view(params.task_id)
        if view.state == "terminal":
            raise MCPError(types.INVALID_PARAMS, f"task {view.task_id} already ended {view.status}")
        request = CancelRequest(params=CancelParams(task_id=view.task_id, reason=CANCEL_REASON))
        await self._call(request)
        view = await self._call(WaitRequest(params=WaitParams(task_id=view.task_id, timeout_s=CANCEL_WAIT_S)))
        return {} if _modern(ctx) else legacy_task(view)

    async def list(self, ctx: Context, params: types.PaginatedRequestParams) -> dict[str, JsonValue]:
        page = await self._call(ListRequest(params=ListParams(limit=LIST_PAGE, before=params.cursor)))
        listed: dict[str, JsonValue] = {"tasks": [legacy_task(view) for view in page]}
        if len(page) == LIST_PAGE:
            listed["nextCursor"] = page[-1].task_id
        return listed

    async def _view(self, task_id: str) -> TaskView:
        return await self._call(GetRequest(params=TaskRef(task_id=task_id)))

    async def _call(self, request: Request[ResultT]) -> ResultT:
        """The daemon's answer; its refusal as a JSON-RPC error (a task it does not know, or that
        is not the caller's, is invalid params)."""
        try:
            return await self._port.call(request)
        except ApiClientError as exc:
            code = types.INVALID_PARAMS if exc.code == NOT_FOUND else types.INTERNAL_ERROR
            raise MCPError(code, str(exc)) from None
