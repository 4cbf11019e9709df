"""The dashboard's JSON API: each route one or a few calls of the daemon's socket API, made as the
user who started `agentd web`, so the daemon's scoping (own tasks; admins all) applies unchanged.

A route answers the daemon's view as JSON; a refusal of the daemon is answered with its message
and a status that says what kind it is (`error_status`). Only `tasks_page` does more than pass a
view on: the task page's event stream (`fanout.py`), and the reads pages repeat, which are shared
between them (`task_cache.py`, `shared_reads.py`).
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any, TypeVar

from pydantic import BaseModel, JsonValue, ValidationError
from starlette.requests import Request
from starlette.responses import JSONResponse, Response, StreamingResponse

from agentd.api.async_port import DaemonPort
from agentd.api.client import BAD_RESPONSE, CONNECTION_LOST, TIMED_OUT, UNREACHABLE, UNTRUSTED_DAEMON
from agentd.errors import ApiClientError
from dashboard.errors import BadInput
from dashboard.fanout import TaskStreams
from dashboard.shared_reads import Transcripts
from protocol.api import (
    FORBIDDEN,
    NOT_FOUND,
    ApprovalDecideParams,
    ApprovalDecideRequest,
    ApprovalListRequest,
    CancelParams,
    CancelRequest,
    ExtendParams,
    ExtendRequest,
    ForkParams,
    ForkRequest,
    GetRequest,
    ListParams,
    ScheduleListRequest,
    SchedulePauseRequest,
    ScheduleRef,
    ScheduleResumeRequest,
    StatusRequest,
    TaskRef,
    TranscriptParams,
    TriggerListRequest,
    TriggerPauseRequest,
    TriggerRef,
    TriggerResumeRequest,
)

PAGE_SIZE = 50
KEEPALIVE_S = 15.0
MAX_BODY_BYTES = 64 * 1024

ModelT = TypeVar("ModelT", bound=BaseModel)
Handler = Callable[[Request], Awaitable[Response]]


def error_status(exc: ApiClientError) -> int:
    if exc.code == NOT_FOUND:
        return 404
    if exc.code == FORBIDDEN:
        return 403
    if exc.code in (UNREACHABLE, TIMED_OUT, BAD_RESPONSE, CONNECTION_LOST, UNTRUSTED_DAEMON):
        return 502
    return 409


def answers(handler: Handler) -> Handler:
    """`handler` with the daemon's refusals and bad input answered as JSON errors."""

    async def answered(request: Request) -> Response:
        try:
            return await handler(request)
        except ApiClientError as exc:
            return JSONResponse({"error": exc.message}, status_code=error_status(exc))
        except BadInput as exc:
            return JSONResponse({"error": str(exc)}, status_code=400)
        except ValidationError as exc:
            return JSONResponse({"error": _first_problem(exc)}, status_code=400)

    return answered


def _dump(value: Any) -> JsonValue:
    if isinstance(value, BaseModel):
        dumped: JsonValue = value.model_dump(mode="json")
        return dumped
    if isinstance(value, list):
        return [_dump(item) for item in value]
    raise TypeError(type(value))


async def _body(request: Request, model: type[ModelT], **fixed: object) -> ModelT:
    raw = await request.body()
    if len(raw) > MAX_BODY_BYTES:
        raise BadInput(f"the request body is over {MAX_BODY_BYTES} bytes")
    try:
        data = json.loads(raw or b"{}")
    except ValueError:
        raise BadInput("the request body is not JSON") from None
    if not isinstance(data, dict):
        raise BadInput("the request body must be a JSON object")
    return model.model_validate({**data, **fixed})


def _first_problem(exc: ValidationError) -> str:
    first = exc.errors()[0]
    where = ".".join(str(part) for part in first["loc"]) or "the request"
    return f"{where}: {first['msg']}"


def _query_int(request: Request, name: str, default: int) -> int:
    text = request.query_params.get(name)
    if text is None or text == "":
        return default
    if not text.isdigit():
        raise BadInput(f"{name}: expected a whole number, got {text!r}")
    return int(text)


class Api:
    """The routes over one daemon."""

    def __init__(self, port: DaemonPort, streams: TaskStreams) -> None:
        self.port = port
        self.streams = streams
        self.summaries = streams.summaries
        self.transcripts = Transcripts(port)
        self.lists = streams.lists

    async def tasks_page(self, request: Request) -> Response:
        query = request.query_params
        params = ListParams.model_validate(
            {
                "state": query.get("state") or None,
                "schedule_id": query.get("schedule") or None,
                "trigger": query.get("trigger") or None,
                "before": query.get("before") or None,
                "limit": PAGE_SIZE,
            }
        )
        page = await self.lists.page(params)
        before = page[-1].task_id if len(page) == params.limit else None
        return JSONResponse({"tasks": _dump(page), "before": before})

    async def task(self, request: Request) -> Response:
        TaskRef(task_id=request.path_params["task_id"])  # a malformed id is a 400, not a read
        return JSONResponse(await self.summaries.summary(request.path_params["task_id"]))

    async def events(self, request: Request) -> Response:
        """The task's events as server-sent events: those after `Last-Event-ID` (or `?after=`),
        then each as it is journaled, then one `end` with the task as it ended."""
        task_id = request.path_params["task_id"]
        await self.port.call(GetRequest(params=TaskRef(task_id=task_id)))  # 404 before streaming
        header = request.headers.get("last-event-id", "")
        after = int(header) if header.isdigit() else _query_int(request, "after", 0)
        return StreamingResponse(
            self._stream(task_id, after),
            media_type="text/event-stream",
            headers={"cache-control": "no-store", "x-accel-buffering": "no"},
        )

    async def _stream(self, task_id: str, after: int) -> AsyncIterator[str]:
        yield "retry: 2000\n\n"
        async for push in self.streams.follow(task_id, after):
            yield push.text

    async def transcript(self, request: Request) -> Response:
        params = TranscriptParams.model_validate(
            {
                "task_id": request.path_params["task_id"],
                "handle": request.query_params.get("handle") or "0",
                "after_seq": _query_int(request, "after", 0),
            }
        )
        return JSONResponse(_dump(await self.transcripts.page(params)))

    async def cancel(self, request: Request) -> Response:
        params = CancelParams(task_id=request.path_params["task_id"], reason="cancelled from agentd web")
        return JSONResponse(_dump(await self.port.call(CancelRequest(params=params))))

    async def fork(self, request: Request) -> Response:
        params = await _body(request, ForkParams, task_id=request.path_params["task_id"])
        return JSONResponse(_dump(await self.port.call(ForkRequest(params=params))))

    async def extend(self, request: Request) -> Response:
        params = await _body(request, ExtendParams, task_id=request.path_params["task_id"])
        return JSONResponse(_dump(await self.port.call(ExtendRequest(params=params))))

    async def approvals(self, request: Request) -> Response:
        return JSONResponse(_dump(await self.port.call(ApprovalListRequest())))

    async def decide(self, request: Request) -> Response:
        params = await _body(request, ApprovalDecideParams)
        return JSONResponse(_dump(await self.port.call(ApprovalDecideRequest(params=params))))

    async def schedules(self, request: Request) -> Response:
        return JSONResponse(_dump(await self.port.call(ScheduleListRequest())))

    async def schedule_switch(self, request: Request) -> Response:
        ref = ScheduleRef(schedule_id=request.path_params["schedule_id"])
        if _action(request) == "pause":
            return JSONResponse(_dump(await self.port.call(SchedulePauseRequest(params=ref))))
        return JSONResponse(_dump(await self.port.call(ScheduleResumeRequest(params=ref))))

    async def triggers(self, request: Request) -> Response:
        return JSONResponse(_dump(await self.port.call(TriggerListRequest())))

    async def trigger_switch(self, request: Request) -> Response:
        ref = TriggerRef(name=request.path_params["name"])
        if _action(request) == "pause":
            return JSONResponse(_dump(await self.port.call(TriggerPauseRequest(params=ref))))
        return JSONResponse(_dump(await self.port.call(TriggerResumeRequest(params=ref))))

    async def daemon(self, request: Request) -> Response:
        return JSONResponse(_dump(await self.port.call(StatusRequest())))


def _action(request: Request) -> str:
    action = str(request.path_params["action"])
    if action not in ("pause", "resume"):
        raise BadInput(f"{action!r}: expected pause or resume")
    return action
