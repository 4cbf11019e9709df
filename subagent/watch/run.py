"""The watcher's driver: hold one server's session and report every change of a watched resource.

- 2025-11-25 (any handshake version): `resources/subscribe` per URI; each
  `notifications/resources/updated` of a watched URI becomes `ev/resource`; with globs,
  `notifications/resources/list_changed` re-lists and subscribes new matches, unsubscribes
  removed ones.
- 2026-07-28: one `subscriptions/listen` change stream (`resource_subscriptions` = the URIs,
  `resources_list_changed` when globs need it). A new selection opens its new stream *before* the
  old one closes, so no change falls in a gap. `SubscriptionLost` (or the server closing the
  stream) re-lists and re-listens, and every URI gets a synthetic delivery (no replay exists).

After each (re)subscription: `ev/watch_state armed` with the list, then one synthetic
`ev/resource` per newly subscribed URI (read after subscribe). Before arming, and again after
each tools or resources list change, `ev/catalogue` with the server's tools, resources and
templates (paginated, bounded): the daemon hands it to the trigger's tasks so their first model
request need not wait for their own connection to the server (docs/decisions.md).

A server that cannot notify → `unsupported`, exit 0. A lost session → an `mcp.disconnect` event
with the reason, exit 6: the daemon's governor restarts watchers, so there is no second restart
loop here (docs/decisions.md).
"""

from __future__ import annotations

import logging
import sys
import time
import traceback
import warnings
from collections.abc import Sequence
from contextlib import AsyncExitStack
from dataclasses import dataclass, field

import anyio
import mcp_types
from mcp import ClientSession, MCPDeprecationWarning, MCPError
from mcp.client.session import IncomingMessage
from mcp.client.subscriptions import (
    ResourcesListChanged,
    ResourceUpdated,
    Subscription,
    SubscriptionLost,
    ToolsListChanged,
    listen,
)
from pydantic import JsonValue, ValidationError

from protocol import control
from protocol.events import EventName
from protocol.exit_codes import ExitCode
from protocol.watch import (
    CatalogueParams,
    CatalogueReport,
    Era,
    WatchPayload,
    WatchState,
    WatchStateName,
    WatchStateParams,
)
from subagent.channel import ControlChannel
from subagent.errors import WatchEnded, WatchLost, WatchUnsupported
from subagent.tools.connection import brief, list_resources, list_templates, list_tools
from subagent.tools.hint import catalogue_of
from subagent.tools.server_events import EventBudget, log_fields
from subagent.tools.stdio import StdioNotes
from subagent.watch.outbox import Outbox, Sender
from subagent.watch.session import is_connection_loss, open_session, why_lost
from subagent.watch.targets import (
    Interest,
    Selection,
    diff,
    era_of,
    fit_frame,
    state_detail,
    unsupported_reason,
)

logger = logging.getLogger(__name__)
# The watcher speaks 2025's subscribe (and ping) only on 2025 connections, where they are the protocol.
warnings.filterwarnings("ignore", "resources/(un)?subscribe is removed", MCPDeprecationWarning)
warnings.filterwarnings("ignore", ".*ping", MCPDeprecationWarning)

# A change stream lost more often than this within the window is a lost session (exit 6).
MAX_RELISTENS = 3
RELISTEN_WINDOW_S = 60.0
MAX_LIST_PAGES = 1000
SUBSCRIBE_CONCURRENCY = 8
# 2025 over HTTP: how often a `ping` checks that the server still knows us (stdio: its exit says).
KEEPALIVE_S = 30.0
# How long the pending frames may take to reach the supervisor at exit.
FLUSH_TIMEOUT_S = 2.0


@dataclass(slots=True)
class _Stream:
    """One open 2026 change stream and the exit stack that closes it."""

    stack: AsyncExitStack
    subscription: Subscription

    async def close(self) -> None:
        await self.stack.aclose()


@dataclass
class Watcher:
    payload: WatchPayload
    outbox: Outbox
    notes: StdioNotes = field(default_factory=StdioNotes)
    session: ClientSession | None = None
    version: str | None = None
    era: Era | None = None
    subscribed: tuple[str, ...] = ()
    _watched: frozenset[str] = frozenset()
    relist_wanted: anyio.Event = field(default_factory=anyio.Event)
    catalogue_wanted: anyio.Event = field(default_factory=anyio.Event)
    budget: EventBudget = field(default_factory=EventBudget)
    connected_at: float = 0.0

    def __post_init__(self) -> None:
        self.interest = Interest.of(self.payload.targets)

    @property
    def server(self) -> str:
        return self.payload.server.name

    @property
    def modern(self) -> bool:
        return self.era == "2026-07-28"

    # ---- what goes up --------------------------------------------------------------------

    def emit(self, event: EventName, fields: dict[str, JsonValue]) -> None:
        self.outbox.put_event(control.Event(params=control.EventParams(event=event, fields=fields)))

    def state(
        self, name: WatchStateName, *, detail: str | None = None, subscribed: Sequence[str] = ()
    ) -> None:
        params = WatchStateParams(state=name, era=self.era, subscribed=list(subscribed), detail=detail)
        self.outbox.put_state(WatchState(params=params))

    def arm(self, uris: Sequence[str], *, left_out: int, refused: Sequence[tuple[str, str]]) -> None:
        """Record `uris` as subscribed and say `armed` (its list cut to one frame, saying so)."""
        self.subscribed = tuple(uris)
        self._watched = frozenset(uris)
        listed, cut = fit_frame(uris)
        detail = state_detail(
            subscribed=len(uris), left_out=left_out, refused=refused, cut_from_frame=cut, version=self.version
        )
        self.state("armed", detail=detail, subscribed=listed)

    def synthetic(self, uris: Sequence[str]) -> None:
        for uri in uris:
            self.outbox.put_resource(uri, synthetic=True)

    def changed(self, uri: str) -> None:
        """A server-reported change: forwarded when some trigger here could own it."""
        if uri in self._watched or self.interest.matches(uri):
            self.outbox.put_resource(uri, synthetic=False)

    def connected(self, outcome: str, started: float, err: str | None = None) -> None:
        fields: dict[str, JsonValue] = {
            "server": self.server,
            "transport": self.payload.server.transport,
            "protocol": self.version,
            "outcome": outcome,
            "tools": 0,
            "resources": len(self.subscribed),
            "dur_ms": round((anyio.current_time() - started) * 1000),
            "err": err,
        }
        self.emit("mcp.connect", fields)

    # ---- what comes down from the server ---------------------------------------------------

    async def on_message(self, message: IncomingMessage) -> None:
        # Server traffic is untrusted: an unreadable line is noted and dropped, never raised.
        if isinstance(message, Exception):
            logger.warning("MCP server %s sent an unreadable message: %s", self.server, brief(message))
        elif isinstance(message, mcp_types.LoggingMessageNotification):
            if self.budget.take(anyio.current_time()):
                p = message.params
                self.emit(
                    "mcp.log", log_fields(self.server, p.level, p.logger, p.data, self.budget.drain_dropped())
                )
        elif self.modern:
            return  # changes come on the listen stream (copies also reach this handler)
        elif isinstance(message, mcp_types.ResourceUpdatedNotification):
            self.changed(str(message.params.uri))
        elif isinstance(message, mcp_types.ToolListChangedNotification):
            self.catalogue_wanted.set()
        elif isinstance(message, mcp_types.ResourceListChangedNotification):
            self.catalogue_wanted.set()
            if self.interest.needs_listing:
                self.relist_wanted.set()

    # ---- shared steps ----------------------------------------------------------------------

    def _session(self) -> ClientSession:
        assert self.session is not None  # set before any era runs
        return self.session

    async def select(self) -> Selection:
        """The URIs to subscribe: the exact ones, plus every listed URI a glob matches (paginated, capped)."""
        selection = Selection(self.interest)
        if not self.interest.needs_listing:
            return selection
        cursor: str | None = None
        seen: set[str] = set()
        for _ in range(MAX_LIST_PAGES):
            params = mcp_types.PaginatedRequestParams(cursor=cursor)
            page = await self._session().list_resources(params=params)
            selection.add_listed(r.uri for r in page.resources)
            cursor = page.next_cursor
            if cursor is None or cursor in seen or selection.full:
                break
            seen.add(cursor)
        else:
            logger.warning(
                "MCP server %s: resources/list stopped after %d pages", self.server, MAX_LIST_PAGES
            )
        return selection

    async def report_catalogue(self) -> None:
        """List the server's tools, resources and templates (paginated, bounded) and report them;
        a listing that fails or is too large is reported as no catalogue, saying why."""
        session = self._session()
        capabilities = session.server_capabilities
        has_tools = capabilities is not None and capabilities.tools is not None
        has_resources = capabilities is not None and capabilities.resources is not None
        report: CatalogueParams
        try:
            with anyio.fail_after(self.payload.server.connect_timeout_s):
                tools = await list_tools(session) if has_tools else ()
                resources = await list_resources(session) if has_resources else ()
                templates = await list_templates(session) if has_resources else ()
        except MCPError as exc:
            if is_connection_loss(exc):
                raise WatchLost(f"the session was lost: {brief(exc.message)}") from exc
            report = CatalogueParams(detail=f"listing failed: {brief(exc.message)}")
        except (TimeoutError, ValidationError, RuntimeError) as exc:
            report = CatalogueParams(detail=f"listing failed: {brief(repr(exc))}")
        else:
            listed = catalogue_of(
                has_tools=has_tools,
                tools=tools,
                has_resources=has_resources,
                resources=resources,
                templates=templates,
            )
            if isinstance(listed, str):
                logger.warning("MCP server %s: %s", self.server, listed)
                report = CatalogueParams(detail=listed[:2000])
            else:
                report = CatalogueParams(catalogue=listed)
        self.outbox.put_catalogue(CatalogueReport(params=report))

    async def follow_catalogue(self) -> None:
        """Report the catalogue again after each list change (a burst is listed once or twice)."""
        while True:
            await self.catalogue_wanted.wait()
            self.catalogue_wanted = anyio.Event()
            await self.report_catalogue()

    async def watch_exit(self) -> None:
        """A stdio server that exits ends the session (over HTTP, a request or the stream notices)."""
        if self.payload.server.transport != "stdio":
            await anyio.sleep_forever()
        await self.notes.exited.wait()
        raise WatchLost(f"the server {self.notes.exit_text()}")

    # ---- 2025-11-25 --------------------------------------------------------------------------

    async def subscribe_many(
        self, uris: Sequence[str], *, unsubscribe: bool = False
    ) -> list[tuple[str, str]]:
        """`resources/(un)subscribe` each URI, a few at a time; the ones the server refused, and why."""
        refused: dict[int, tuple[str, str]] = {}
        work = iter(enumerate(uris))
        session = self._session()

        async def worker() -> None:
            for index, uri in work:
                try:
                    if unsubscribe:
                        await session.unsubscribe_resource(uri)
                    else:
                        await session.subscribe_resource(uri)
                except MCPError as exc:
                    if exc.code == mcp_types.METHOD_NOT_FOUND and not unsubscribe:
                        raise WatchUnsupported(
                            "the server advertises resources.subscribe but does not implement it"
                        ) from exc
                    if is_connection_loss(exc):
                        raise WatchLost(f"the session was lost: {brief(exc.message)}") from exc
                    refused[index] = (uri, brief(exc.message))

        async with anyio.create_task_group() as tg:
            for _ in range(min(SUBSCRIBE_CONCURRENCY, len(uris))):
                tg.start_soon(worker)
        return [refused[i] for i in sorted(refused)]

    async def run_legacy(self) -> None:
        selection = await self.select()
        wanted = selection.result()
        refused = await self.subscribe_many(wanted)
        no = {uri for uri, _ in refused}
        self.arm([u for u in wanted if u not in no], left_out=selection.left_out, refused=refused)
        self.synthetic(self.subscribed)
        async with anyio.create_task_group() as tg:
            if self.payload.server.transport != "stdio":
                tg.start_soon(self.keepalive)
            while True:
                await self.relist_wanted.wait()
                # A list change during the re-listing sets the new event: it is re-listed again.
                self.relist_wanted = anyio.Event()
                await self.relist_legacy()

    async def relist_legacy(self) -> None:
        started = anyio.current_time()
        selection = await self.select()
        wanted = selection.result()
        added, removed = diff(self.subscribed, wanted)
        refused = await self.subscribe_many(added)
        await self.subscribe_many(removed, unsubscribe=True)
        no = {uri for uri, _ in refused}
        if added or removed:
            kept = set(self.subscribed) | set(added)
            self.arm(
                [u for u in wanted if u in kept and u not in no], left_out=selection.left_out, refused=refused
            )
            self.synthetic([u for u in added if u not in no])
        self.connected("refreshed", started)

    async def keepalive(self) -> None:
        while True:
            await anyio.sleep(KEEPALIVE_S)
            try:
                await self._session().send_ping()
            except MCPError as exc:
                if is_connection_loss(exc) or exc.code == mcp_types.REQUEST_TIMEOUT:
                    raise WatchLost(f"the server stopped answering: {brief(exc.message)}") from exc
                return  # it does not do ping: nothing to check with

    # ---- 2026-07-28 --------------------------------------------------------------------------

    async def open_stream(self, selection: Selection) -> _Stream:
        """Open a change stream for `selection` and arm it; raises if the server will not serve one."""
        wanted = selection.result()
        stack = AsyncExitStack()
        try:
            caps = self._session().server_capabilities
            tools_changed = bool(caps and caps.tools and caps.tools.list_changed)
            resources_changed = bool(caps and caps.resources and caps.resources.list_changed)
            subscription = await stack.enter_async_context(
                listen(
                    self._session(),
                    resource_subscriptions=wanted,
                    # List changes: globs re-list on them, and the catalogue is reported again.
                    resources_list_changed=self.interest.needs_listing or resources_changed,
                    tools_list_changed=tools_changed,
                )
            )
        except BaseException as exc:
            await stack.aclose()
            if isinstance(exc, MCPError) and exc.code == mcp_types.METHOD_NOT_FOUND:
                raise WatchUnsupported("the server does not serve subscriptions/listen") from exc
            if isinstance(exc, MCPError | SubscriptionLost | TimeoutError):
                raise WatchLost(f"the change stream could not be opened: {brief(exc)}") from exc
            raise
        honored = set(subscription.honored.resource_subscriptions or ())
        if wanted and not honored:
            await stack.aclose()
            raise WatchUnsupported("the server's change stream honors no resource subscriptions")
        refused = [(u, "not honored by the change stream") for u in wanted if u not in honored]
        self.arm([u for u in wanted if u in honored], left_out=selection.left_out, refused=refused)
        return _Stream(stack, subscription)

    async def run_modern(self) -> None:
        stream = await self.open_stream(await self.select())
        self.synthetic(self.subscribed)
        losses: list[float] = []
        try:
            while True:
                try:
                    event = await stream.subscription.__anext__()
                except (SubscriptionLost, StopAsyncIteration) as exc:
                    now = anyio.current_time()
                    losses = [t for t in losses if now - t < RELISTEN_WINDOW_S] + [now]
                    reason = brief(exc) if isinstance(exc, SubscriptionLost) else "the server closed it"
                    if len(losses) > MAX_RELISTENS:
                        raise WatchLost(
                            f"the change stream ended {len(losses)} times within {RELISTEN_WINDOW_S:g} s;"
                            f" last: {reason}"
                        ) from None
                    stream = await self.relisten(stream, reason)
                    continue
                if isinstance(event, ResourceUpdated):
                    self.changed(event.uri)
                elif isinstance(event, ToolsListChanged):
                    self.catalogue_wanted.set()
                elif isinstance(event, ResourcesListChanged):
                    self.catalogue_wanted.set()
                    if self.interest.needs_listing:
                        stream = await self.relist_modern(stream)
        finally:
            with anyio.CancelScope(shield=True), anyio.move_on_after(FLUSH_TIMEOUT_S):
                await stream.close()

    async def relisten(self, stream: _Stream, reason: str) -> _Stream:
        """The stream ended: listen again and say every URI may have changed (no replay exists)."""
        started = anyio.current_time()
        self.state("connecting", detail=f"change stream ended ({reason}); listening again")
        await stream.close()
        fresh = await self.open_stream(await self.select())
        self.synthetic(self.subscribed)
        self.connected("reconnected", started)
        return fresh

    async def relist_modern(self, stream: _Stream) -> _Stream:
        started = anyio.current_time()
        selection = await self.select()
        before = self.subscribed
        added, removed = diff(before, selection.result())
        if added or removed:
            fresh = await self.open_stream(selection)  # before the old one closes: no gap
            await stream.close()
            stream = fresh
            self.synthetic([u for u in added if u in self._watched])
        self.connected("refreshed", started)
        return stream

    # ---- the whole session ------------------------------------------------------------------

    async def run(self) -> int:
        """Connect, watch until the session cannot go on, and say why; the exit code."""
        spec = self.payload.server
        self.state("connecting")
        started = anyio.current_time()
        code: int = ExitCode.OK
        try:
            async with AsyncExitStack() as stack:
                opened = await open_session(spec, stack, self.notes, self.on_message)
                if isinstance(opened, str):
                    self.connected("failed", started, err=opened)
                    return self.lost(f"could not connect: {opened}")
                self.session, self.version = opened, opened.protocol_version
                self.era = era_of(self.version)
                self.connected_at = anyio.current_time()
                self.connected("ok", started)
                why_not = unsupported_reason(self.era, self.version, opened.server_capabilities)
                if why_not is not None:
                    return self.unsupported(why_not)
                try:
                    async with anyio.create_task_group() as tg:
                        tg.start_soon(self.watch_exit)
                        # Before arming: the synthetic deliveries' tasks already find it.
                        await self.report_catalogue()
                        tg.start_soon(self.follow_catalogue)
                        await (self.run_modern() if self.modern else self.run_legacy())
                except Exception as exc:  # noqa: BLE001 - sorted below; anything else propagates
                    code = await self.ended(exc)
        except Exception as exc:  # noqa: BLE001 - the transport's own exit may report the loss
            code = await self.ended(exc)
        return code

    async def ended(self, exc: Exception) -> int:
        ending = _ending(exc)
        if ending is None:
            raise exc
        if isinstance(ending, WatchUnsupported):
            return self.unsupported(str(ending))
        fallback = str(ending) if isinstance(ending, WatchEnded) else f"the session was lost: {brief(ending)}"
        return self.lost(await why_lost(self.payload.server, self.notes, fallback))

    def unsupported(self, why: str) -> int:
        logger.warning("MCP server %s: cannot watch resources: %s", self.server, why)
        self.state("unsupported", detail=why)
        return ExitCode.OK

    def lost(self, why: str) -> int:
        up_ms = round((anyio.current_time() - self.connected_at) * 1000) if self.connected_at else 0
        self.emit("mcp.disconnect", {"server": self.server, "dur_ms": up_ms, "err": why})
        logger.error("MCP server %s: watcher session lost: %s", self.server, why)
        return ExitCode.MCP


def _ending(exc: BaseException) -> Exception | None:
    """The first exception in `exc` (task groups wrap them) that ends a session, or None."""
    if isinstance(exc, BaseExceptionGroup):
        for inner in exc.exceptions:
            if (found := _ending(inner)) is not None:
                return found
        return None
    if isinstance(exc, WatchEnded | MCPError | SubscriptionLost | TimeoutError | anyio.BrokenResourceError):
        return exc
    if isinstance(exc, anyio.ClosedResourceError | anyio.EndOfStream | OSError):
        return exc
    return None


async def run_async(payload: WatchPayload, channel: ControlChannel, outbox: Outbox) -> int:
    watcher = Watcher(payload, outbox)
    code: int = ExitCode.OK
    async with anyio.create_task_group() as tg:
        # `ctrl/cancel` and a closed channel cancel everything: the session closes (the stdio
        # server is stopped by the transport's ladder, shielded and bounded) and we exit 0.
        tg.start_soon(channel.serve, tg.cancel_scope.cancel, lambda _message: None)
        code = await watcher.run()
        tg.cancel_scope.cancel()
    return code


def run_watcher(payload: WatchPayload, channel: ControlChannel) -> int:
    """The watcher's top level: run, flush what is pending (bounded), return the exit code."""
    logging.basicConfig(level=logging.WARNING, format="watcher: %(message)s", stream=sys.stderr)
    outbox = Outbox()
    sender = Sender(channel, outbox)
    sender.start()
    started = time.monotonic()
    try:
        return anyio.run(run_async, payload, channel, outbox)
    except Exception:  # noqa: BLE001 - the top-level handler: say what broke, never die silently
        traceback.print_exc(file=sys.stderr)
        logger.error("internal error after %.1f s", time.monotonic() - started)
        return ExitCode.FAILURE
    finally:
        outbox.close()
        # A sender still blocked on a full pipe holds the channel's write lock: leave it to exit.
        if sender.join(FLUSH_TIMEOUT_S):
            channel.close()
