"""Servers offered from a catalogue hint (`SpawnPayload.mcp_catalogues`, a trigger's task) while
they connect in the background: real fixture servers over stdio, leak-checked.

`open_tools` yields before a hinted server is connected, offering the hint's tools and resources;
a call waits for the connection, then goes by the server's own listing (a tool the hint had and
the server does not gets the unknown-tool observation); `resource_read` waits the same way; a
hinted server that cannot connect ends the run if required and loses its tools if optional; one
still starting when the run ends is stopped at once (SIGTERM, no wait for it to read stdin's EOF).
"""

from __future__ import annotations

from pathlib import Path

import anyio
import psutil
import pytest

from protocol.mcp_catalogue import CatalogueResource, CatalogueTool, McpCatalogue
from subagent.errors import McpFatal
from subagent.tools import ToolRouter, open_tools
from subagent.tools import router as router_module
from subagent.tools.stdio import FORCE_KILL_TIMEOUT_S, KILL_REAP_TIMEOUT_S, PROCESS_TERMINATION_TIMEOUT_S
from tests.tools.servers import SENTINEL_ENV, EventLog, make_payload, stdio_server, tool_call, wait_until

pytestmark = [pytest.mark.anyio, pytest.mark.processes]

LADDER_S = PROCESS_TERMINATION_TIMEOUT_S + FORCE_KILL_TIMEOUT_S + KILL_REAP_TIMEOUT_S
TEXT = {"type": "object", "properties": {"text": {"type": "string"}}, "required": ["text"]}
HINT = McpCatalogue(
    has_tools=True,
    tools=[
        CatalogueTool(name="record", description="Append `text` to calls.log.", input_schema=TEXT),
        CatalogueTool(name="ghost", description="Gone by the time the task connects.", input_schema=TEXT),
    ],
    has_resources=True,
    resources=[CatalogueResource(uri="demo://readme", name="readme", description="What this server does.")],
)


def names(router: ToolRouter) -> set[str]:
    return {spec.name for spec in router.specs()}


async def test_a_hinted_server_is_offered_at_once_and_its_own_listing_replaces_the_hint(
    tmp_path: Path,
) -> None:
    events = EventLog()
    server = stdio_server("demo", "mcp_basic.py", env={SENTINEL_ENV: str(tmp_path)})
    payload = make_payload(server, mcp_catalogues={"demo": HINT.model_dump()})
    with anyio.fail_after(60):
        async with open_tools(payload, sink=events) as router:
            # Yielded before the server answered anything: the hint is what is offered.
            assert events.named("mcp.connect", server="demo") == []
            assert {"demo__record", "demo__ghost", "resource_read"} <= names(router)
            assert "demo://readme" in router.resource_catalogue()
            hinted_version = router.version

            ghost = await router.call(tool_call("demo__ghost", text="boo"), timeout_s=30)
            assert ghost.is_error
            assert ghost.text == "no such tool `demo__ghost`: it was not run; call one of the tools offered"
            (connected,) = events.named("mcp.connect", server="demo")
            assert connected["outcome"] == "ok"
            assert "demo__ghost" not in names(router) and "demo__echo" in names(router)
            assert router.version > hinted_version

            recorded = await router.call(tool_call("demo__record", text="once"), timeout_s=30)
            assert not recorded.is_error and recorded.text == "recorded once"
    assert (tmp_path / "calls.log").read_text() == "once\n"


async def test_resource_read_waits_for_a_hinted_server() -> None:
    payload = make_payload(stdio_server("demo", "mcp_basic.py"), mcp_catalogues={"demo": HINT.model_dump()})
    with anyio.fail_after(60):
        async with open_tools(payload, sink=EventLog()) as router:
            outcome = await router.call(tool_call("resource_read", uri="demo://readme"), timeout_s=30)
    assert not outcome.is_error and "demo" in outcome.text


async def test_an_optional_hinted_server_that_cannot_connect_loses_its_tools() -> None:
    events = EventLog()
    server = stdio_server("mute", "mcp_silent.py", connect_timeout_s=0.5, required=False)
    payload = make_payload(server, mcp_catalogues={"mute": HINT.model_dump()})
    with anyio.fail_after(0.5 + 2 * LADDER_S + 10):
        async with open_tools(payload, sink=events) as router:
            assert "mute__record" in names(router)
            outcome = await router.call(tool_call("mute__record", text="x"), timeout_s=30)
            assert outcome.is_error
            assert outcome.text.startswith(
                "tool `mute__record` was not run: MCP server `mute` could not connect (no answer to "
                "initialize and listing within 0.5 s)"
            )
            assert not any(name.startswith("mute__") for name in names(router))
            assert "resource_read" not in names(router) and router.resource_catalogue() == ""
    (failed,) = events.named("mcp.connect", server="mute")
    assert failed["outcome"] == "failed"


async def test_a_required_hinted_server_that_cannot_connect_ends_the_run() -> None:
    payload = make_payload(
        stdio_server("mute", "mcp_silent.py", connect_timeout_s=0.5),
        mcp_catalogues={"mute": HINT.model_dump()},
    )
    yielded = False

    async def the_run() -> None:
        nonlocal yielded
        async with open_tools(payload, sink=EventLog()):
            yielded = True
            await anyio.sleep_forever()  # the model's turn: the background connect's failure ends it

    with anyio.fail_after(0.5 + 2 * LADDER_S + 10), pytest.raises(McpFatal) as raised:
        await the_run()
    assert yielded
    assert str(raised.value) == (
        "required MCP server `mute` could not connect: no answer to initialize and listing within 0.5 s"
    )


@pytest.mark.alone
async def test_a_hinted_server_still_starting_when_the_run_ends_is_stopped_at_once(tmp_path: Path) -> None:
    # It never answers, and never reads stdin's EOF: only a signal ends it. A run that needed no
    # tool must not wait out the polite rung for a server it never talked to. The bound is wall
    # time (half the polite rung): run alone, where no other test's processes delay the reap.
    server = stdio_server("mute", "mcp_silent.py", "--ignore-eof", env={SENTINEL_ENV: str(tmp_path)})
    payload = make_payload(server, mcp_catalogues={"mute": HINT.model_dump()})
    with anyio.fail_after(30):
        async with open_tools(payload, sink=EventLog()):
            await wait_until(lambda: any(tmp_path.glob("silent-*")))
            (started,) = [path async for path in anyio.Path(tmp_path).glob("silent-*")]
            pid = int(started.name.removeprefix("silent-"))
            ended = anyio.current_time()
        retired_s = anyio.current_time() - ended
    assert retired_s < PROCESS_TERMINATION_TIMEOUT_S / 2, retired_s
    assert not psutil.pid_exists(pid)


def _fixture_children(script: str) -> list[psutil.Process]:
    found = []
    for proc in psutil.Process().children(recursive=True):
        try:
            if script in " ".join(proc.cmdline()):
                found.append(proc)
        except psutil.Error:
            continue
    return found


async def test_a_hinted_server_starts_only_once_the_first_request_is_on_the_wire() -> None:
    # The run sets `hinted_after` when its first model request's body is sent: starting the
    # server before that forked this process and took a core while the request was being sent.
    events = EventLog()
    sent = anyio.Event()
    payload = make_payload(stdio_server("demo", "mcp_basic.py"), mcp_catalogues={"demo": HINT.model_dump()})
    with anyio.fail_after(60):
        async with open_tools(payload, sink=events, hinted_after=sent) as router:
            assert "demo__record" in names(router)
            # Long enough for an unheld connect to have started its server (it does so at once).
            await anyio.sleep(0.5)
            assert _fixture_children("mcp_basic.py") == []
            assert events.named("mcp.connect", server="demo") == []
            sent.set()
            await wait_until(lambda: bool(events.named("mcp.connect", server="demo")), timeout_s=30)
            (connected,) = events.named("mcp.connect", server="demo")
            assert connected["outcome"] == "ok"
            assert "demo__echo" in names(router)


async def test_a_held_hinted_connect_starts_anyway_after_its_bound(monkeypatch: pytest.MonkeyPatch) -> None:
    # No request is ever sent (a scripted model, or an endpoint that refuses the connection):
    # the server still connects, `HINTED_HOLD_S` late at most.
    monkeypatch.setattr(router_module, "HINTED_HOLD_S", 0.2)
    events = EventLog()
    payload = make_payload(stdio_server("demo", "mcp_basic.py"), mcp_catalogues={"demo": HINT.model_dump()})
    with anyio.fail_after(60):
        async with open_tools(payload, sink=events, hinted_after=anyio.Event()) as router:
            outcome = await router.call(tool_call("demo__record", text="late"), timeout_s=30)
            assert not outcome.is_error and outcome.text == "recorded late"
    (connected,) = events.named("mcp.connect", server="demo")
    assert connected["outcome"] == "ok"
