"""The tool router: the one surface the loop calls for tools — scope, wire names, dispatch, events.

It offers every granted MCP tool under its wire name plus the self-tools, maps a call back to
its server, and turns every failure into an observation for the model. It raises only `McpFatal`
(a required server is gone for good) or cancellation. A server that dies mid-call is restarted
once; the call itself is never repeated, because it may not be idempotent. An HTTP server that
refused a call because it forgot the session gets a new session and the call once more: it never ran.

A server whose catalogue the payload carries (`SpawnPayload.mcp_catalogues`, a trigger's task) is
offered from that hint at once and connected in the background: the first model request does not
wait for it. A call (or `resource_read`) to it waits for that connection; its own listing then
replaces the hint, and a call to a tool it no longer lists gets the unknown-tool observation. If
it cannot connect, it is as if it had failed at the start: a required one ends the run
(`McpFatal`), an optional one's tools are withdrawn.
"""

from __future__ import annotations

import fnmatch
import json
import re
import secrets
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass
from typing import Literal, cast

import anyio
import mcp_types
from pydantic import JsonValue, ValidationError

from protocol import approval
from protocol.control import ApproveResult
from protocol.spawn import SpawnPayload
from subagent.errors import McpFatal
from subagent.messages import JsonObject, ToolCall, ToolOutcome, ToolSpec, unoffered_text
from subagent.telemetry import EventSink, describe
from subagent.tools import delegate
from subagent.tools.catalogue import CatalogueEntry, render_catalogue, template_matches
from subagent.tools.compact import compact_catalogue
from subagent.tools.connection import Failure, ServerLink
from subagent.tools.hint import listing_of
from subagent.tools.naming import ToolRef, assign_wire_names, offered_spec, plain_name
from subagent.tools.render import render_tool_result, tool_result_images
from subagent.tools.selftools import (
    IDLE_SPEC,
    NOTE_READ,
    NOTE_WRITE,
    NOTHING_TO_DO,
    RESERVED_NAMES,
    RESOURCE_READ,
    SPECS,
    Notes,
    NoteWriteArgs,
    ResourceReadArgs,
    SupervisorLink,
    invalid_arguments,
    notes_path,
    read_resource,
)

MAX_WITHHELD_SHOWN = 10
# The longest a hinted server's connect waits for the run's first model request to be sent.
HINTED_HOLD_S = 1.0
_TRACEPARENT = re.compile(r"^00-[0-9a-f]{32}-[0-9a-f]{16}-[0-9a-f]{2}$")

# The `err` of a `tool.result` event: what went wrong, as a kind (an observation's text may
# quote the server, and results stay out of the logs unless content capture is on).
ErrorKind = Literal[
    "scope",
    "arguments",
    "tool_error",
    "timeout",
    "protocol",
    "invalid",
    "transport",
    "server_restarted",
    "server_withdrawn",
    "mcp_fatal",
    "cancelled",
    "denied",
]


def needs_tasks(tool: mcp_types.Tool) -> bool:
    """A tool that can only run task-augmented (MCP Tasks), which agentd does not support yet."""
    return tool.execution is not None and tool.execution.task_support == "required"


def withheld_note(names: list[str], *, shown: int = MAX_WITHHELD_SHOWN) -> str:
    """The line telling the model which tools exist but are not offered, and why ("" if none)."""
    if not names:
        return ""
    listed = ", ".join(f"`{n}`" for n in names[:shown])
    more = f" and {len(names) - shown} more" if len(names) > shown else ""
    return (
        f"Not offered: {listed}{more} — they need MCP Tasks (task-augmented execution), which "
        "agentd does not support yet."
    )


def call_meta(payload: SpawnPayload) -> mcp_types.RequestParamsMeta:
    """The `_meta` every `tools/call` carries, so backing services can correlate and dedupe re-runs."""
    traceparent = payload.telemetry.traceparent
    if traceparent is None or not _TRACEPARENT.match(traceparent):
        traceparent = f"00-{secrets.token_hex(16)}-{secrets.token_hex(8)}-01"
    meta = {"agentd/run_id": payload.run_id, "agentd/task_id": payload.task_id, "traceparent": traceparent}
    # RequestParamsMeta is a TypedDict open to extra keys (PEP 728), which mypy cannot express yet.
    return cast(mcp_types.RequestParamsMeta, meta)


def failure_text(tool: str, failure: Failure, timeout_s: float) -> str:
    """The observation for a call that produced no result (other than a lost connection)."""
    if failure.kind == "timeout":
        return f"tool `{tool}` timed out after {timeout_s:g} s (not retried; it may still have had effects)"
    if failure.kind == "transport":
        return f"tool `{tool}` failed: transport error: {failure.detail}"
    return f"tool `{tool}` failed: {failure.detail}"


@dataclass(frozen=True, slots=True)
class _Route:
    server: str | None  # None: a self-tool
    tool: str


Restart = Callable[[ServerLink, int], Awaitable[str | None]]


class _LinkSource:
    """A server as `resource_read` sees it; a read is idempotent, so it is retried after a restart."""

    def __init__(self, link: ServerLink, timeout_s: float, restart: Restart) -> None:
        self._link, self._restart = link, restart
        self._timeout_s = min(timeout_s, link.spec.call_timeout_s)
        self.name = link.name

    def lists(self, uri: str) -> bool:
        listing = self._link.listing
        return any(r.uri == uri for r in listing.resources) or any(
            template_matches(t.uri_template, uri) for t in listing.templates
        )

    async def read(self, uri: str) -> mcp_types.ReadResourceResult | Failure:
        error = await self._link.settled()
        if error is not None:
            return Failure("lost", f"the server could not connect ({error})")
        generation = self._link.generation
        result = await self._link.read_resource(uri, timeout_s=self._timeout_s)
        if isinstance(result, Failure) and result.kind in ("lost", "session"):
            error = await self._restart(self._link, generation)
            if error is not None:
                return Failure("lost", f"the server died and could not be restarted ({error})")
            result = await self._link.read_resource(uri, timeout_s=self._timeout_s)
        return result


class ToolRouter:
    """Every tool in this agent's scope, by wire name. Built by `open_tools`."""

    def __init__(
        self, payload: SpawnPayload, *, sink: EventSink, supervisor: SupervisorLink | None = None
    ) -> None:
        self._payload = payload
        self._sink = sink
        # Routes the `subagent_*` self-tools to the supervisor (absent: they are not offered).
        self._supervisor = supervisor
        self._child_schemas: delegate.Schemas = {}
        self._meta = call_meta(payload)
        self._notes = Notes(notes_path(payload))
        hints = payload.mcp_catalogues
        self._links = tuple(
            ServerLink(
                spec,
                payload.loop,
                sink=sink,
                on_change=self._rebuild,
                hint=listing_of(hints[spec.name]) if spec.name in hints else None,
            )
            for spec in payload.mcp_servers
        )
        self._routes: dict[str, _Route] = {}
        # Wire names of tools the servers list that this agent's `tools` grant leaves out.
        self._ungranted: frozenset[str] = frozenset()
        self._specs: tuple[ToolSpec, ...] = ()
        self._catalogue = ""
        self._version = 0
        # Invariant: True once the model called `nothing_to_do` in this run (never reset).
        self.idle_reported = False

    def specs(self) -> tuple[ToolSpec, ...]:
        """Every tool in scope, wire-named: the granted MCP tools, then the self-tools."""
        return self._specs

    def ungranted(self) -> frozenset[str]:
        """Wire names of tools a granted server lists that are not offered (the grant leaves them
        out, or they need MCP Tasks): a call of one is refused as not granted; any other name not
        offered does not exist."""
        return self._ungranted

    def resource_catalogue(self) -> str:
        """The compact resource awareness block (docs/loop.md, "Resources"), then a line naming the tools
        withheld because they need MCP Tasks; "" when there is neither."""
        return self._catalogue

    @property
    def version(self) -> int:
        """Bumps whenever `specs()` or `resource_catalogue()` change."""
        return self._version

    def _canonical(self, name: str) -> str:
        """A tool's wire name (`fs__read_file`) as the supervisor names it (`fs/read_file`)."""
        route = self._routes.get(name)
        if route is not None and route.server is not None:
            return f"{route.server}/{route.tool}"
        return name

    def _offered(self) -> list[ServerLink]:
        return [link for link in self._links if (link.generation > 0 or link.hinted) and not link.withdrawn]

    def _rebuild(self) -> None:
        """Recompute the offered tools and the catalogue from the latest listings."""
        offered = self._offered()
        tools: dict[ToolRef, mcp_types.Tool] = {}
        withheld: list[str] = []
        ungranted: set[str] = set()
        for link in offered:
            allowed = None if link.spec.tools is None else frozenset(link.spec.tools)
            for tool in link.listing.tools:
                if allowed is not None and tool.name not in allowed:
                    ungranted.add(plain_name(ToolRef(link.name, tool.name)))
                    continue
                if needs_tasks(tool):
                    # Listed, and not offered (the catalogue says why): a call of it is refused as
                    # outside the agent's scope, not answered as a tool that does not exist.
                    withheld.append(f"{link.name}/{tool.name}")
                    ungranted.add(plain_name(ToolRef(link.name, tool.name)))
                    continue
                tools.setdefault(ToolRef(link.name, tool.name), tool)
        names = assign_wire_names(tools, reserved=RESERVED_NAMES)
        wire = {ref: name for name, ref in names.items()}
        offered_specs = [
            offered_spec(wire[ref], tool.description, tool.input_schema) for ref, tool in tools.items()
        ]
        # Rendered for the primary endpoint's window: boilerplate dropped, long descriptions cut.
        specs = list(compact_catalogue(offered_specs, self._payload.intelligence[0].context_window))
        routes = {name: _Route(ref.server, ref.tool) for name, ref in names.items()}
        has_resources = any(link.listing.readable for link in offered)
        for spec in SPECS:
            if spec.name != RESOURCE_READ or has_resources:
                specs.append(spec)
                routes[spec.name] = _Route(None, spec.name)
        if self._payload.idle_signal:
            specs.append(IDLE_SPEC)
            routes[IDLE_SPEC.name] = _Route(None, IDLE_SPEC.name)
        # Offered even at the depth cap: the supervisor's refusal then names the cap.
        if self._supervisor is not None:
            for spec in delegate.SPECS:
                specs.append(spec)
                routes[spec.name] = _Route(None, spec.name)
        entries = [
            CatalogueEntry(link.name, r.uri, r.name, r.description or "", r.mime_type, r.size)
            for link in offered
            for r in link.listing.resources
        ]
        entries += [
            CatalogueEntry(link.name, t.uri_template, t.name, t.description or "", t.mime_type, template=True)
            for link in offered
            for t in link.listing.templates
        ]
        resources = render_catalogue(entries, self._payload.loop.catalogue_bytes)
        catalogue = "\n\n".join(part for part in (resources, withheld_note(withheld)) if part)
        if tuple(specs) != self._specs or catalogue != self._catalogue:
            self._version += 1
        self._specs, self._routes, self._catalogue = tuple(specs), routes, catalogue
        self._ungranted = frozenset(ungranted - routes.keys())

    async def _connect_all(self) -> None:
        """Connect every granted server without a hint concurrently; raise `McpFatal` if a
        required one failed. Hinted servers are offered from their hint meanwhile."""
        errors: dict[str, str] = {}

        async def connect(link: ServerLink) -> None:
            error = await link.connect()
            if error is not None:
                errors[link.name] = error

        async with anyio.create_task_group() as tg:
            for link in self._links:
                if not link.hinted:
                    tg.start_soon(connect, link)
        self._rebuild()
        for link in self._links:
            if link.spec.required and link.name in errors:
                raise McpFatal(f"required MCP server `{link.name}` could not connect: {errors[link.name]}")

    async def _connect_hinted(
        self, link: ServerLink, after: anyio.Event | None, released: anyio.Event | None = None
    ) -> None:
        """A hinted server's first connect, behind the first model request: its own listing
        replaces the hint; a failure is what it would have been at the start.

        It starts once `after` is set (the run's first model request is on the wire, or its first
        call ended), at most `HINTED_HOLD_S` late: starting a stdio server forks this process
        and its imports take a core, which delayed that request by tens of milliseconds.

        Raises:
            McpFatal: the server is required and could not connect.
        """
        if released is not None:
            await released.wait()  # unbounded: the held run's own `hold_s` bounds it
        if after is not None:
            with anyio.move_on_after(HINTED_HOLD_S):
                await after.wait()
        error = await link.connect()
        link.first_settled(error)
        self._rebuild()
        if error is not None and link.spec.required:
            raise McpFatal(f"required MCP server `{link.name}` could not connect: {error}")

    async def _restart(self, link: ServerLink, seen_generation: int) -> str | None:
        """Reconnect a server a request saw die: `None` when it is back, else why not.

        Raises:
            McpFatal: the server is required and could not be restarted.
        """
        error = await link.reconnect(seen_generation)
        if error is not None:
            if link.spec.required:
                raise McpFatal(f"required MCP server `{link.name}` died and could not be restarted: {error}")
            link.withdrawn = True
        self._rebuild()
        return error

    def idempotent(self, call: ToolCall) -> bool:
        """Whether `call` may run again after its run stopped during it: a read-only self-tool,
        or a tool its server declares idempotent (`[mcp.NAME] idempotent`)."""
        route = self._routes.get(call.name)
        if route is None:
            return False
        if route.server is None:
            # Asking again for a child resumes the child that call started; waiting and status
            # only read.
            return route.tool in (RESOURCE_READ, NOTE_READ, delegate.SPAWN, delegate.WAIT, delegate.STATUS)
        link = next(link for link in self._links if link.name == route.server)
        return any(fnmatch.fnmatchcase(route.tool, glob) for glob in link.spec.idempotent)

    async def call(
        self, call: ToolCall, *, timeout_s: float, starting: Starting | None = None
    ) -> ToolOutcome:
        """Run one tool call; every failure is an observation, except `McpFatal` and cancellation.

        `timeout_s` is the caller's bound (already clamped to the deadline); a server's own
        `call_timeout_s` may shorten it. `starting` is awaited right before the tool itself runs
        (after the scope and argument checks and any approval): a call refused before that never
        started.
        """
        route = self._routes.get(call.name)
        server = route.server if route is not None else None
        capture = self._payload.telemetry.capture_content
        arguments = call.raw_arguments or json.dumps(call.arguments, sort_keys=True, separators=(",", ":"))
        fields: dict[str, JsonValue] = {"tool": call.name, "server": server, "call_id": call.id}
        self._sink("tool.call", {**fields, **describe(arguments, capture=capture, prefix="args")})
        started = anyio.current_time()
        # `err` is a kind, never text: an error observation can carry server content.
        err: ErrorKind | None = "cancelled"
        outcome: ToolOutcome | None = None
        try:
            outcome, err = await self._dispatch(route, call, timeout_s, starting or _nothing)
            return outcome
        except McpFatal:
            err = "mcp_fatal"
            raise
        finally:
            result = describe(outcome.text if outcome else "", capture=capture, prefix="result")
            dur_ms = round((anyio.current_time() - started) * 1000)
            is_error = outcome.is_error if outcome else True
            ending: dict[str, JsonValue] = {"is_error": is_error, "dur_ms": dur_ms, "err": err}
            self._sink("tool.result", {**fields, **result, **ending})

    async def _dispatch(
        self, route: _Route | None, call: ToolCall, timeout_s: float, starting: Starting
    ) -> tuple[ToolOutcome, ErrorKind | None]:
        if route is None:
            return self._unknown(call.name), "scope"
        if call.arguments is None:
            problem = call.arguments_error or "not a JSON object"
            text = f"tool `{call.name}` was not run: invalid arguments ({problem}); send a JSON object"
            return ToolOutcome(text, is_error=True), "arguments"
        if route.server is None:
            await starting()
            outcome = await self._self_tool(route.tool, call.arguments, timeout_s, call.id)
            return outcome, "tool_error" if outcome.is_error else None
        link = next(link for link in self._links if link.name == route.server)
        if link.hinted:
            # Offered from a catalogue hint: the call waits for the connection, then goes by
            # what the server itself lists now.
            error = await link.settled()
            if error is not None:
                text = (
                    f"tool `{call.name}` was not run: MCP server `{link.name}` could not connect "
                    f"({error}); its tools are not available."
                )
                return ToolOutcome(text, is_error=True), "server_withdrawn"
            if self._routes.get(call.name) != route:
                return self._unknown(call.name), "scope"
        if approval.gated(link.spec.approval, route.tool):
            started = anyio.current_time()
            denied = await self._ask_approval(link, route.tool, call, timeout_s)
            if denied is not None:
                return denied, "denied"
            # The wait counts against the deadline: the call gets only what is left of it.
            timeout_s -= anyio.current_time() - started
        await starting()
        return await self._mcp_call(link, route.tool, call, timeout_s)

    def _unknown(self, name: str) -> ToolOutcome:
        return ToolOutcome(unoffered_text(name, self._ungranted), is_error=True)

    async def _ask_approval(
        self, link: ServerLink, tool: str, call: ToolCall, timeout_s: float
    ) -> ToolOutcome | None:
        """Hold a gated call until the supervisor relays a person's decision: None to run it, else
        the observation saying who refused it and why. Fails closed: no answer is a denial."""
        started = anyio.current_time()

        def refused(outcome: approval.Outcome, reason: str | None) -> ToolOutcome:
            waited_s = anyio.current_time() - started
            return ToolOutcome(
                approval.denial_text(call.name, outcome, reason, waited_s=waited_s), is_error=True
            )

        if self._supervisor is None:
            return refused("denied", "no supervisor is present to ask a person")
        params: dict[str, JsonValue] = {
            "call_id": call.id[:200],
            "server": link.name,
            "tool": tool,
            "arguments": dict(call.arguments or {}),
            "timeout_s": link.spec.approval_timeout_s,
        }
        # The supervisor answers `timeout` itself; this bound only covers a supervisor that never does.
        with anyio.move_on_after(min(timeout_s, link.spec.approval_timeout_s + 5.0)):
            try:
                response = await self._supervisor.request("sup/approve", params)
                answer = ApproveResult.model_validate(response)
            except (RuntimeError, TimeoutError, ConnectionError, ValidationError) as exc:
                return refused("denied", f"the approval request failed ({type(exc).__name__})")
            if answer.outcome == "approved":
                return None
            return refused(answer.outcome, answer.reason)
        return refused("timeout", None)

    async def _mcp_call(
        self, link: ServerLink, tool: str, call: ToolCall, timeout_s: float
    ) -> tuple[ToolOutcome, ErrorKind | None]:
        wire_name, arguments = call.name, call.arguments or {}
        timeout_s = min(timeout_s, link.spec.call_timeout_s)
        if timeout_s <= 0:
            text = f"tool `{wire_name}` was not run: no time is left before the deadline"
            return ToolOutcome(text, is_error=True), "timeout"
        generation = link.generation
        result = await link.call_tool(tool, arguments, timeout_s=timeout_s, meta=self._meta, call_id=call.id)
        if isinstance(result, Failure) and result.kind == "session":
            # Refused unrun (the server restarted and forgot us): a new session, then the call
            # once more — safe for any tool, because the first attempt never ran.
            error = await self._restart(link, generation)
            if error is not None:
                text = (
                    f"tool `{wire_name}` was not run: MCP server `{link.name}` lost the session and a "
                    f"new one could not be opened ({error}); its tools are no longer available."
                )
                return ToolOutcome(text, is_error=True), "server_withdrawn"
            result = await link.call_tool(
                tool, arguments, timeout_s=timeout_s, meta=self._meta, call_id=call.id
            )
        if not isinstance(result, Failure):
            images = tool_result_images(result)
            outcome = ToolOutcome(render_tool_result(result), is_error=bool(result.is_error), images=images)
            return outcome, "tool_error" if outcome.is_error else None
        if result.kind == "session":
            return ToolOutcome(failure_text(wire_name, result, timeout_s), is_error=True), "transport"
        if result.kind != "lost":
            return ToolOutcome(failure_text(wire_name, result, timeout_s), is_error=True), result.kind
        error = await self._restart(link, generation)
        crashed = f"tool `{wire_name}` failed: MCP server `{link.name}` crashed during the call and"
        if error is None:
            text = (
                f"{crashed} was restarted. The call was not retried (it may have had effects); "
                "call it again if that is safe."
            )
            return ToolOutcome(text, is_error=True), "server_restarted"
        text = f"{crashed} could not be restarted ({error}); its tools are no longer available."
        return ToolOutcome(text, is_error=True), "server_withdrawn"

    async def _self_tool(
        self, tool: str, arguments: JsonObject, timeout_s: float, call_id: str
    ) -> ToolOutcome:
        if tool in delegate.TOOLS and self._supervisor is not None:
            return await delegate.call(
                tool,
                arguments,
                self._supervisor.request,
                timeout_s=timeout_s,
                canonical=self._canonical,
                schemas=self._child_schemas,
                call_id=call_id,
            )
        try:
            if tool == RESOURCE_READ:
                args = ResourceReadArgs.model_validate(arguments)
                links = [link for link in self._offered() if link.listing.readable]
                sources = [_LinkSource(link, timeout_s, self._restart) for link in links]
                return await read_resource(args, sources)
            if tool == NOTE_WRITE:
                return await self._notes.write(NoteWriteArgs.model_validate(arguments))
        except ValidationError as exc:
            return invalid_arguments(tool, exc)
        if tool == NOTE_READ:
            return await self._notes.read()
        if tool == NOTHING_TO_DO and self._payload.idle_signal:
            self.idle_reported = True
            return ToolOutcome("noted: this run did nothing; the next run will wait longer")
        return ToolOutcome(f"tool `{tool}` is not available yet", is_error=True)


Starting = Callable[[], Awaitable[None]]


async def _nothing() -> None:
    return None


def _sole_error(group: BaseExceptionGroup[BaseException]) -> BaseException:
    """The one real exception inside task-group wrapping, or the group itself if there are several."""
    leaves: list[BaseException] = []
    pending: list[BaseException] = [group]
    while pending:
        exc = pending.pop()
        if isinstance(exc, BaseExceptionGroup):
            pending.extend(exc.exceptions)
        else:
            leaves.append(exc)
    return leaves[0] if len(leaves) == 1 else group


@asynccontextmanager
async def open_tools(
    payload: SpawnPayload,
    *,
    sink: EventSink,
    supervisor: SupervisorLink | None = None,
    hinted_after: anyio.Event | None = None,
    released: anyio.Event | None = None,
) -> AsyncIterator[ToolRouter]:
    """Connect the granted MCP servers concurrently and yield the router over them and the self-tools
    (servers with a catalogue hint connect in the background, after it has yielded and, given
    `hinted_after`, once that is set or `HINTED_HOLD_S` passed — and never before `released` is
    set: a held run, prestarted for a trigger, starts no server before its `ctrl/go`).

    On exit every connection is retired; a stdio server's shutdown ladder runs shielded.

    Raises:
        McpFatal: a required server could not connect (at entry) or died for good (from `call`).
    """
    router = ToolRouter(payload, sink=sink, supervisor=supervisor)
    try:
        async with anyio.create_task_group() as tg:
            for link in router._links:
                tg.start_soon(link.run)
            for link in router._links:
                if link.hinted:
                    tg.start_soon(router._connect_hinted, link, hinted_after, released)
            try:
                await router._connect_all()
                yield router
            finally:
                tg.cancel_scope.cancel()
    except BaseExceptionGroup as group:
        # The task group wraps whatever crossed it (McpFatal, or the caller's own error): hand
        # callers the exception they would have seen without it.
        raise _sole_error(group) from None
