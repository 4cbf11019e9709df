"""One granted MCP server: its connection's lifecycle, listings and requests (the SDK adapter).

A `ServerLink` owns one task that opens the transport and a `ClientSession`, negotiates the
server's newest era the SDK's way (`server/discover` for 2026-07-28, else the `initialize`
handshake), runs the cursor-paginated listings, then parks until that connection is retired (a
reconnect, or the router closing), following list changes meanwhile. Requests come from any task. SDK
exceptions are translated here and nowhere else: a request returns the server's result or a
`Failure` value, and a `list_changed` notification refreshes the listing in place.

A link may start from a catalogue hint (`protocol.mcp_catalogue`): its listing is the hint's
until its first connection lists the server itself; `settled` waits for that first connection.
"""

from __future__ import annotations

import logging
import re
import warnings
from collections.abc import Awaitable, Callable, Mapping
from contextlib import AbstractAsyncContextManager, AsyncExitStack
from dataclasses import dataclass, replace
from typing import Any, Literal, TypeVar

import anyio
import httpx2
import mcp_types
from mcp import ClientSession, MCPDeprecationWarning, MCPError
from mcp.client._probe import negotiate_auto  # the policy `Client(mode="auto")` runs, for a bare session
from mcp.client._transport import TransportStreams
from mcp.client.session import IncomingMessage
from mcp.client.subscriptions import SubscriptionLost, ToolsListChanged, listen
from mcp_types.version import MODERN_PROTOCOL_VERSIONS
from pydantic import JsonValue, ValidationError

from protocol.spawn import LoopKnobs, McpServerSpec
from subagent.errors import LoginRequired
from subagent.telemetry import EventSink
from subagent.tools.http import SESSION_LOST, TRANSPORT_FAILED, oauth_auth, open_http_transport
from subagent.tools.oauth_store import LoginProvider
from subagent.tools.server_events import EventBudget, log_fields, progress_fields
from subagent.tools.stdio import KILL_REAP_TIMEOUT_S, StdioNotes, open_stdio_transport

logger = logging.getLogger(__name__)
# `log_level` is an explicit opt-in to a 2025 server's logging; the SDK's 2026 deprecation notice
# would only repeat on every connect.
warnings.filterwarnings("ignore", "The logging capability is deprecated", MCPDeprecationWarning)

MAX_PAGES = 100
MAX_ITEMS = 10_000
MAX_ERROR_CHARS = 500
CLIENT_INFO = mcp_types.Implementation(name="agentd", version="0.1.0")
# Backstop over the SDK's own request timer, which starts only once the request is written.
TIMEOUT_SLACK_S = 1.0
# Upper bound on retiring a connection: the whole stdio shutdown ladder plus the writer flush.
TEARDOWN_BOUND_S = 4 * KILL_REAP_TIMEOUT_S
# How long a connect failure waits to learn the server's exit status, when its pipe closed first.
EXIT_SEEN_WITHIN_S = 0.5

_SDK_PREFIX = re.compile(r"^\s*MCP error -?\d+:\s*")
FailureKind = Literal["timeout", "protocol", "invalid", "transport", "lost", "session"]
T = TypeVar("T")


@dataclass(frozen=True, slots=True)
class Failure:
    """A request that produced no result. `lost`: the connection died under it (the request may
    have run); `session`: an HTTP server refused it because it no longer knows the session (it
    did not run)."""

    kind: FailureKind
    detail: str


@dataclass(frozen=True, slots=True)
class Listing:
    """What a server offers, as last listed. `has_resources`: it declared the capability."""

    tools: tuple[mcp_types.Tool, ...] = ()
    resources: tuple[mcp_types.Resource, ...] = ()
    has_resources: bool = False
    templates: tuple[mcp_types.ResourceTemplate, ...] = ()

    @property
    def readable(self) -> bool:
        """Whether `resource_read` has anything to name here: listed resources or templates."""
        return bool(self.resources or self.templates)


def brief(text: object) -> str:
    """Untrusted error text, on one line and bounded, fit for an observation or a log."""
    line = " ".join(str(text).split())
    return line if len(line) <= MAX_ERROR_CHARS else f"{line[:MAX_ERROR_CHARS]}…"


def failure_from(exc: MCPError) -> Failure:
    """The one translation of a JSON-RPC error (received or synthesised by the SDK) into a `Failure`."""
    if exc.code == mcp_types.REQUEST_TIMEOUT:
        return Failure("timeout", brief(exc.message))
    if exc.code == mcp_types.CONNECTION_CLOSED:
        return Failure("lost", brief(exc.message))
    if exc.code == mcp_types.INVALID_REQUEST and exc.message == "Session terminated":
        return Failure("lost", "the server ended the HTTP session")
    if exc.code == SESSION_LOST:
        return Failure("session", brief(exc.message))
    if exc.code == TRANSPORT_FAILED:
        return Failure("transport", brief(exc.message))
    # The TS SDK spells its errors "MCP error -32602: ..."; the code is already in our prefix.
    message = _SDK_PREFIX.sub("", exc.message, count=1)
    return Failure("protocol", f"protocol error {exc.code}: {brief(message)}")


def login_required(exc: BaseException) -> LoginRequired | None:
    """The `LoginRequired` behind a failure that crossed the SDK's task groups, if that is what it was."""
    if isinstance(exc, LoginRequired):
        return exc
    if isinstance(exc, BaseExceptionGroup):
        for inner in exc.exceptions:
            if (found := login_required(inner)) is not None:
                return found
    return None


def open_transport(
    spec: McpServerSpec, knobs: LoopKnobs, notes: StdioNotes, auth: httpx2.Auth | None = None
) -> AbstractAsyncContextManager[TransportStreams]:
    if spec.transport == "stdio":
        return open_stdio_transport(spec, notes)
    return open_http_transport(spec, knobs, auth)


def start_error(exc: OSError) -> str:
    """Why a stdio server's command could not start, naming the program (`No such file: /x/y`)."""
    what = exc.strerror or str(exc)
    return f"could not start the server: {what}" + (f": {exc.filename}" if exc.filename else "")


def connect_error(failure: str, notes: StdioNotes) -> str:
    """The reason a connect failed, preferring what the transport saw over the bare protocol error."""
    if notes.verdict is not None:
        return notes.verdict
    exited = notes.exit_text()
    if exited is not None:
        return f"the server {exited} before answering initialize"
    return failure


async def _all_pages(
    fetch: Callable[[str | None], Awaitable[tuple[list[T], str | None]]], what: str
) -> tuple[T, ...]:
    """Follow `nextCursor` to the end, bounded in pages and items (a server may loop forever)."""
    items: list[T] = []
    cursor: str | None = None
    seen: set[str] = set()
    for _ in range(MAX_PAGES):
        page, cursor = await fetch(cursor)
        items.extend(page)
        if len(items) >= MAX_ITEMS or cursor is None or cursor in seen:
            break
        seen.add(cursor)
    else:
        logger.warning("%s listing stopped after %d pages", what, MAX_PAGES)
    return tuple(items[:MAX_ITEMS])


async def list_tools(session: ClientSession) -> tuple[mcp_types.Tool, ...]:
    async def page(cursor: str | None) -> tuple[list[mcp_types.Tool], str | None]:
        result = await session.list_tools(params=mcp_types.PaginatedRequestParams(cursor=cursor))
        return result.tools, result.next_cursor

    return await _all_pages(page, "tools/list")


async def list_templates(session: ClientSession) -> tuple[mcp_types.ResourceTemplate, ...]:
    """The server's resource templates; none when it does not implement the listing."""

    async def page(cursor: str | None) -> tuple[list[mcp_types.ResourceTemplate], str | None]:
        params = mcp_types.PaginatedRequestParams(cursor=cursor)
        result = await session.list_resource_templates(params=params)
        return result.resource_templates, result.next_cursor

    try:
        return await _all_pages(page, "resources/templates/list")
    except MCPError as exc:
        if exc.code != mcp_types.METHOD_NOT_FOUND:
            raise
        return ()


async def list_resources(session: ClientSession) -> tuple[mcp_types.Resource, ...]:
    async def page(cursor: str | None) -> tuple[list[mcp_types.Resource], str | None]:
        result = await session.list_resources(params=mcp_types.PaginatedRequestParams(cursor=cursor))
        return result.resources, result.next_cursor

    return await _all_pages(page, "resources/list")


@dataclass(slots=True)
class _Attempt:
    reason: Literal["ok", "reconnected"]
    done: anyio.Event
    error: str | None = None

    def finish(self, error: str | None) -> None:
        if not self.done.is_set():
            self.error = error
            self.done.set()


class ServerLink:
    """The connection to one granted server, restartable, with its latest listing."""

    def __init__(
        self,
        spec: McpServerSpec,
        knobs: LoopKnobs,
        *,
        sink: EventSink,
        on_change: Callable[[], None],
        hint: Listing | None = None,
    ) -> None:
        self.spec = spec
        self.listing = hint or Listing()
        # Invariant: True while the listing is a catalogue hint and the first connect is under way;
        # its end (up, or failed) is `_first_done`, with the failure in `first_error`.
        self.hinted = hint is not None
        self._first_done = anyio.Event()
        self.first_error: str | None = None
        # Invariant: bumps on every successful (re)connect; a caller that saw a request die
        # passes the generation it used, so concurrent callers restart the server only once.
        self.generation = 0
        # Set when an optional server died and could not be restarted: its tools are withdrawn.
        self.withdrawn = False
        self._knobs = knobs
        self._sink = sink
        self._on_change = on_change
        self._session: ClientSession | None = None
        # The negotiated protocol version of the current connection (its era).
        self._protocol: str | None = None
        self._retire = anyio.Event()
        self._attempts, self._attempt_queue = anyio.create_memory_object_stream[_Attempt](1)
        self._reconnect_lock = anyio.Lock()
        self._failed_restart: tuple[int, str] | None = None
        self._stale: set[str] = set()
        self._refreshing = False
        # OAuth client credentials, with the token cached across reconnects (None: no OAuth).
        self._auth = oauth_auth(spec)
        # Bounds the log and progress events this server can cause.
        self._budget = EventBudget()

    @property
    def name(self) -> str:
        return self.spec.name

    @property
    def up(self) -> bool:
        return self._session is not None

    def first_settled(self, error: str | None) -> None:
        """The first connect ended; a failed one drops the hint (the server offers nothing)."""
        self.first_error = error
        if error is not None:
            self.listing = Listing()
        self.hinted = False
        self._first_done.set()

    async def settled(self) -> str | None:
        """Wait for a hinted link's first connect (bounded like `connect`); why it failed, or None.
        Returns at once for a link that had no hint or has settled."""
        if not self.hinted:
            return self.first_error
        with anyio.move_on_after(self.spec.connect_timeout_s + TEARDOWN_BOUND_S):
            await self._first_done.wait()
        if not self._first_done.is_set():
            return f"no connection within {self.spec.connect_timeout_s:g} s"
        return self.first_error

    async def run(self) -> None:
        """The owner task: serves one connection at a time until the router cancels it."""
        async with self._attempt_queue:
            async for attempt in self._attempt_queue:
                await self._serve(attempt)

    async def connect(self, *, reason: Literal["ok", "reconnected"] = "ok") -> str | None:
        """Retire the current connection (if any) and open a new one; `None` or why it failed."""
        attempt = _Attempt(reason, anyio.Event())
        self._retire.set()
        try:
            await self._attempts.send(attempt)
        except (anyio.BrokenResourceError, anyio.ClosedResourceError):
            return "the tool layer is shutting down"
        with anyio.move_on_after(self.spec.connect_timeout_s + TEARDOWN_BOUND_S):
            await attempt.done.wait()
        return (
            attempt.error
            if attempt.done.is_set()
            else f"no connection within {self.spec.connect_timeout_s:g} s"
        )

    async def reconnect(self, seen_generation: int) -> str | None:
        """Restart a connection a request saw die, unless another caller already did."""
        async with self._reconnect_lock:
            if self.up and self.generation != seen_generation:
                return None
            if self._failed_restart is not None and self._failed_restart[0] == seen_generation:
                return self._failed_restart[1]  # another caller already tried, and it failed
            error = await self.connect(reason="reconnected")
            if error is not None:
                self._failed_restart = (seen_generation, error)
            return error

    async def _serve(self, attempt: _Attempt) -> None:
        self._retire = anyio.Event()
        started = anyio.current_time()
        closing_at: float | None = None
        try:
            async with AsyncExitStack() as stack:
                self._protocol = None
                opened = await self._open(stack)
                if isinstance(opened, str):
                    self._emit_connect("failed", started, listing=Listing(), err=opened)
                    attempt.finish(opened)
                    return
                self._session, self.listing = opened
                self._protocol = opened[0].protocol_version
                self.generation += 1
                self._emit_connect(attempt.reason, started, listing=self.listing)
                attempt.finish(None)
                try:
                    async with anyio.create_task_group() as watch:
                        watch.start_soon(self._listen, opened[0])
                        await self._retire.wait()
                        watch.cancel_scope.cancel()
                finally:
                    self._session = None
                    closing_at = anyio.current_time()
        # Top of the owner task: a transport that crashed must not take the router down with it.
        except Exception as exc:  # noqa: BLE001
            logger.warning("MCP server %s: connection failed: %s", self.name, brief(repr(exc)))
            login = login_required(exc)
            attempt.finish(str(login) if login is not None else f"connection failed: {brief(exc)}")
        finally:
            self._session = None
            if closing_at is not None:
                dur_ms = round((anyio.current_time() - closing_at) * 1000)
                self._sink("mcp.disconnect", {"server": self.name, "dur_ms": dur_ms})

    async def _open(self, stack: AsyncExitStack) -> tuple[ClientSession, Listing] | str:
        notes = StdioNotes()
        if isinstance(self._auth, LoginProvider):
            try:
                self._auth.check()
            except LoginRequired as exc:
                return str(exc)
        try:
            opened = open_transport(self.spec, self._knobs, notes, self._auth)
            read, write = await stack.enter_async_context(opened)
        except OSError as exc:
            return brief(start_error(exc))
        session = ClientSession(
            read,
            write,
            message_handler=self._on_message,
            client_info=CLIENT_INFO,
            log_level=self.spec.log_level,
        )
        await stack.enter_async_context(session)
        timeout_s = self.spec.connect_timeout_s
        try:
            with anyio.fail_after(timeout_s):
                # Each server gets its newest era: `server/discover` (2026-07-28), falling back to
                # the `initialize` handshake (2025-11-25 and older) on servers that lack it.
                await negotiate_auto(session)
                capabilities = session.server_capabilities
                if (
                    self.spec.log_level is not None
                    and capabilities is not None
                    and capabilities.logging is not None
                    and session.protocol_version not in MODERN_PROTOCOL_VERSIONS
                ):
                    await session.set_logging_level(self.spec.log_level)
                has_resources = capabilities is not None and capabilities.resources is not None
                tools = await list_tools(session) if capabilities and capabilities.tools is not None else ()
                resources = await list_resources(session) if has_resources else ()
                templates = await list_templates(session) if has_resources else ()
        except TimeoutError:
            return connect_error(f"no answer to initialize and listing within {timeout_s:g} s", notes)
        except MCPError as exc:
            failure = failure_from(exc)
            if failure.kind == "lost" and self.spec.transport == "stdio":
                with anyio.move_on_after(EXIT_SEEN_WITHIN_S):
                    await notes.exited.wait()
            if exc.code == mcp_types.METHOD_NOT_FOUND and self.spec.transport == "http":
                return (
                    f"{failure.detail} (the url answers neither server/discover nor initialize; if it "
                    'is a legacy HTTP+SSE server, set transport = "sse" and its /sse url)'
                )
            return connect_error(failure.detail, notes)
        except (RuntimeError, ValidationError) as exc:
            return f"invalid handshake: {brief(exc)}"
        if self.spec.tools is not None:
            unlisted = sorted(set(self.spec.tools) - {t.name for t in tools})
            if unlisted:
                logger.warning(
                    "MCP server %s: the tools allow-list names %s, which the server does not list",
                    self.name,
                    ", ".join(brief(name) for name in unlisted),
                )
        return session, Listing(tools, resources, has_resources, templates)

    def _emit_connect(
        self, outcome: str, started: float, *, listing: Listing, err: str | None = None
    ) -> None:
        fields: dict[str, JsonValue] = {
            "server": self.name,
            "transport": self.spec.transport,
            "protocol": self._protocol,
            "outcome": outcome,
            "tools": len(listing.tools),
            "resources": len(listing.resources),
            "dur_ms": round((anyio.current_time() - started) * 1000),
            "err": err,
        }
        self._sink("mcp.connect", fields)

    async def _listen(self, session: ClientSession) -> None:
        """On a 2026-07-28 connection, list changes arrive only on a `subscriptions/listen` stream."""
        capabilities = session.server_capabilities
        if session.protocol_version not in MODERN_PROTOCOL_VERSIONS or capabilities is None:
            return
        tools = capabilities.tools is not None and bool(capabilities.tools.list_changed)
        resources = capabilities.resources is not None and bool(capabilities.resources.list_changed)
        if not (tools or resources):
            return
        try:
            async with listen(session, tools_list_changed=tools, resources_list_changed=resources) as stream:
                async for event in stream:
                    await self._list_changed("tools" if isinstance(event, ToolsListChanged) else "resources")
        except (MCPError, SubscriptionLost, TimeoutError, RuntimeError) as exc:
            # The listing stays as it is; the next reconnect lists afresh.
            logger.info("MCP server %s: no change stream: %s", self.name, brief(exc))

    async def _on_message(self, message: IncomingMessage) -> None:
        # Server traffic is untrusted: an unreadable line is noted and dropped, never raised.
        modern = self._session is not None and self._session.protocol_version in MODERN_PROTOCOL_VERSIONS
        if isinstance(message, Exception):
            logger.warning("MCP server %s sent an unreadable message: %s", self.name, brief(message))
        elif isinstance(message, mcp_types.LoggingMessageNotification):
            if self._budget.take(anyio.current_time()):
                params = message.params
                dropped = self._budget.drain_dropped()
                self._sink(
                    "mcp.log", log_fields(self.name, params.level, params.logger, params.data, dropped)
                )
        elif modern:
            return  # list changes come through `_listen` (copies also reach this handler)
        elif isinstance(message, mcp_types.ToolListChangedNotification):
            await self._list_changed("tools")
        elif isinstance(message, mcp_types.ResourceListChangedNotification):
            await self._list_changed("resources")

    async def _list_changed(self, kind: str) -> None:
        # Coalesce a burst of notifications into as few re-listings as possible.
        self._stale.add(kind)
        if self._refreshing:
            return
        self._refreshing = True
        try:
            while self._stale:
                kinds = frozenset(self._stale)
                self._stale.clear()
                await self._refresh(kinds)
        finally:
            self._refreshing = False

    async def _refresh(self, kinds: frozenset[str]) -> None:
        session = self._session
        if session is None:
            return
        started = anyio.current_time()
        listing = self.listing
        try:
            with anyio.fail_after(self.spec.connect_timeout_s):
                if "tools" in kinds:
                    listing = replace(listing, tools=await list_tools(session))
                if "resources" in kinds and listing.has_resources:
                    listing = replace(
                        listing,
                        resources=await list_resources(session),
                        templates=await list_templates(session),
                    )
        except (TimeoutError, MCPError, ValidationError) as exc:
            logger.warning("MCP server %s: re-listing failed: %s", self.name, brief(repr(exc)))
            return
        if session is not self._session:
            return  # the connection was replaced meanwhile; its own listing is newer
        self.listing = listing
        self._emit_connect("refreshed", started, listing=listing)
        self._on_change()

    async def call_tool(
        self,
        tool: str,
        arguments: Mapping[str, Any],
        *,
        timeout_s: float,
        meta: mcp_types.RequestParamsMeta,
        call_id: str = "",
    ) -> mcp_types.CallToolResult | Failure:
        """`tools/call`, bounded by `timeout_s`; cancelling the caller sends `notifications/cancelled`.

        Progress the server reports becomes `mcp.progress` events naming `call_id`.
        """
        session = self._session
        if session is None:
            return Failure("lost", "the server is not connected")

        async def on_progress(progress: float, total: float | None, message: str | None) -> None:
            if self._budget.take(anyio.current_time()):
                dropped = self._budget.drain_dropped()
                fields = progress_fields(self.name, tool, call_id, progress, total, message, dropped)
                self._sink("mcp.progress", fields)

        try:
            with anyio.fail_after(timeout_s + TIMEOUT_SLACK_S):
                return await session.call_tool(
                    tool,
                    dict(arguments),
                    read_timeout_seconds=timeout_s,
                    meta=meta,
                    progress_callback=on_progress,
                )
        except TimeoutError:
            return Failure("timeout", "no response")
        except MCPError as exc:
            return failure_from(exc)
        except (RuntimeError, ValidationError) as exc:
            return Failure("invalid", f"the server's result was invalid: {brief(exc)}")

    async def read_resource(self, uri: str, *, timeout_s: float) -> mcp_types.ReadResourceResult | Failure:
        """`resources/read`, bounded by `timeout_s`."""
        session = self._session
        if session is None:
            return Failure("lost", "the server is not connected")
        try:
            with anyio.fail_after(timeout_s):
                return await session.read_resource(uri)
        except TimeoutError:
            return Failure("timeout", "no response")
        except MCPError as exc:
            return failure_from(exc)
        except (RuntimeError, ValidationError) as exc:
            return Failure("invalid", f"the server's result was invalid: {brief(exc)}")
