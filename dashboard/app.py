"""The dashboard's ASGI app: the gate every request passes (dashboard/access.py), the security
headers of every answer, the pages and the JSON API (dashboard/routes.py).

Every page path answers the same `index.html`; its script (`static/main.js`) draws the page the
path names from the JSON API. The Content-Security-Policy lets the page run only scripts and
styles served from here: no inline script, no other origin, no frames.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, MutableMapping
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs

from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import FileResponse, JSONResponse, Response
from starlette.routing import Mount, Route
from starlette.staticfiles import StaticFiles

from agentd.api.async_port import DaemonPort
from dashboard.access import Admit, Exchange, Keys, Origins, Refusal, cookie_name, decide
from dashboard.fanout import TaskStreams
from dashboard.routes import Api, answers

STATIC = Path(__file__).resolve().parent / "static"
PAGES = ("/", "/tasks/{task_id}", "/approvals", "/schedules", "/triggers", "/daemon")

CSP = (
    "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self'; connect-src 'self'; "
    "base-uri 'none'; form-action 'none'; frame-ancestors 'none'"
)
SECURITY_HEADERS = (
    (b"content-security-policy", CSP.encode()),
    (b"x-content-type-options", b"nosniff"),
    (b"referrer-policy", b"no-referrer"),
    (b"x-frame-options", b"DENY"),
    (b"cache-control", b"no-store"),
)

Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]
ASGIApp = Callable[[Scope, Receive, Send], Awaitable[None]]


class Gate:
    """An ASGI app that lets in only what `decide` admits, and adds the security headers."""

    def __init__(self, app: ASGIApp, keys: Keys, origins: Origins) -> None:
        self._app = app
        self._keys = keys
        self._origins = origins

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self._app(scope, receive, send)
            return
        headers = {
            name.decode("latin-1").lower(): value.decode("latin-1") for name, value in scope["headers"]
        }
        tokens = parse_qs(scope.get("query_string", b"").decode("latin-1")).get("token")
        verdict = decide(
            self._keys,
            self._origins,
            method=scope["method"],
            path=scope["path"],
            query_token=tokens[0] if tokens else None,
            headers=headers,
        )

        async def send_secured(message: Message) -> None:
            if message["type"] == "http.response.start":
                message["headers"] = [*message.get("headers", []), *SECURITY_HEADERS]
            await send(message)

        if isinstance(verdict, Admit):
            scope.setdefault("state", {})["session"] = verdict.session
            await self._app(scope, receive, send_secured)
        elif isinstance(verdict, Exchange):
            await self._redirect(verdict, send_secured)
        else:
            await _refuse(verdict, send_secured)

    async def _redirect(self, exchange: Exchange, send: Send) -> None:
        cookie = f"{cookie_name(self._origins.port)}={exchange.session}; Path=/; HttpOnly; SameSite=Strict"
        headers = [(b"location", exchange.location.encode()), (b"set-cookie", cookie.encode())]
        await send({"type": "http.response.start", "status": 303, "headers": headers})
        await send({"type": "http.response.body", "body": b""})


async def _refuse(refusal: Refusal, send: Send) -> None:
    body = (refusal.message + "\n").encode()
    headers = [(b"content-type", b"text/plain; charset=utf-8"), (b"content-length", b"%d" % len(body))]
    await send({"type": "http.response.start", "status": refusal.status, "headers": headers})
    await send({"type": "http.response.body", "body": body})


def build_app(port: DaemonPort, keys: Keys, origins: Origins, streams: TaskStreams | None = None) -> Gate:
    """The whole dashboard for the daemon behind `port`; its pages' event streams share `streams`
    (once the server attaches it to its task group)."""
    api = Api(port, streams or TaskStreams(port))

    async def page(request: Request) -> Response:
        return FileResponse(STATIC / "index.html", media_type="text/html; charset=utf-8")

    async def session(request: Request) -> Response:
        return JSONResponse({"csrf": keys.csrf(request.state.session)})

    routes = [
        *(Route(path, page) for path in PAGES),
        Route("/api/session", session),
        Route("/api/tasks", answers(api.tasks_page)),
        Route("/api/tasks/{task_id}", answers(api.task)),
        Route("/api/tasks/{task_id}/events", answers(api.events)),
        Route("/api/tasks/{task_id}/transcript", answers(api.transcript)),
        Route("/api/tasks/{task_id}/cancel", answers(api.cancel), methods=["POST"]),
        Route("/api/tasks/{task_id}/fork", answers(api.fork), methods=["POST"]),
        Route("/api/tasks/{task_id}/extend", answers(api.extend), methods=["POST"]),
        Route("/api/approvals", answers(api.approvals)),
        Route("/api/approvals/decide", answers(api.decide), methods=["POST"]),
        Route("/api/schedules", answers(api.schedules)),
        Route("/api/schedules/{schedule_id}/{action:str}", answers(api.schedule_switch), methods=["POST"]),
        Route("/api/triggers", answers(api.triggers)),
        Route("/api/triggers/{name}/{action:str}", answers(api.trigger_switch), methods=["POST"]),
        Route("/api/daemon", answers(api.daemon)),
        Mount("/static", StaticFiles(directory=STATIC)),
    ]
    return Gate(Starlette(routes=routes), keys, origins)
