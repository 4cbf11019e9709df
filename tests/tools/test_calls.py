"""Calls through the router against real MCP servers, shared by every test in this module.

Starting a Python MCP server costs about a second, so one router over three servers (`demo`,
`paged`, and `narrow` — `paged` again behind an allow-list) serves all of these tests; none of
them changes a server's state. The leak check runs once, when the module's servers shut down.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path

import anyio
import pytest

from subagent.messages import ToolCall, ToolOutcome
from subagent.tools import ToolRouter, open_tools
from subagent.tools.naming import WIRE_NAME
from tests.support.leaks import kill_all, wait_no_descendants
from tests.tools.servers import (
    SENTINEL_ENV,
    TRACEPARENT,
    EventLog,
    make_payload,
    stdio_server,
    tool_call,
    wait_until,
)

pytestmark = pytest.mark.anyio


@dataclass(frozen=True)
class Shared:
    router: ToolRouter
    events: EventLog
    sentinels: Path


@pytest.fixture(scope="module")
async def shared(tmp_path_factory: pytest.TempPathFactory) -> AsyncIterator[Shared]:
    sentinels = tmp_path_factory.mktemp("sentinels")
    notes = tmp_path_factory.mktemp("notes") / "notes.md"
    events = EventLog()
    payload = make_payload(
        stdio_server("demo", "mcp_basic.py", env={SENTINEL_ENV: str(sentinels)}),
        stdio_server("paged", "mcp_paged.py"),
        stdio_server("narrow", "mcp_paged.py", tools=["tool_1", "tool_5", "not_served"]),
        notes_path=str(notes),
    )
    async with open_tools(payload, sink=events) as router:
        yield Shared(router, events, sentinels)
    strays = wait_no_descendants(timeout_s=10.0)
    kill_all(strays)
    assert not strays, f"MCP servers outlived open_tools: {[p.pid for p in strays]}"


def names(router: ToolRouter) -> set[str]:
    return {spec.name for spec in router.specs()}


async def test_every_page_of_a_paged_server_is_listed(shared: Shared) -> None:
    assert {f"paged__tool_{i}" for i in range(7)} <= names(shared.router)
    catalogue = shared.router.resource_catalogue()
    assert all(f"paged://item/{i}" in catalogue for i in range(7))


async def test_an_allow_list_offers_exactly_the_granted_tools_the_server_has(shared: Shared) -> None:
    assert {n for n in names(shared.router) if n.startswith("narrow__")} == {
        "narrow__tool_1",
        "narrow__tool_5",
    }


async def test_every_offered_name_is_a_valid_wire_name(shared: Shared) -> None:
    assert all(WIRE_NAME.match(name) for name in names(shared.router))
    assert {"resource_read", "note_write", "note_read"} <= names(shared.router)


async def test_a_call_of_a_listed_tool_outside_the_grant_is_refused_as_not_granted(shared: Shared) -> None:
    assert "narrow__tool_2" in shared.router.ungranted()
    outcome = await shared.router.call(tool_call("narrow__tool_2"), timeout_s=5)
    assert outcome.is_error
    assert outcome.text == "tool `narrow__tool_2` is not in this agent's granted scope"


@pytest.mark.parametrize("name", ["no_such_tool", "paged.tool_1", "narrow__not_served"])
async def test_a_call_of_a_tool_no_server_lists_is_refused_as_no_such_tool(shared: Shared, name: str) -> None:
    outcome = await shared.router.call(tool_call(name), timeout_s=5)
    assert outcome.is_error
    assert outcome.text == f"no such tool `{name}`: it was not run; call one of the tools offered"


async def test_a_granted_tool_is_called_on_its_server(shared: Shared) -> None:
    assert (await shared.router.call(tool_call("demo__add", a=2, b=3), timeout_s=5)).text == "5"
    assert (await shared.router.call(tool_call("narrow__tool_5"), timeout_s=5)).text == "called tool_5"


async def test_an_is_error_result_is_a_domain_error_observation(shared: Shared) -> None:
    outcome = await shared.router.call(tool_call("demo__fail", message="disk full"), timeout_s=5)
    assert outcome.is_error
    assert "disk full" in outcome.text
    assert "protocol error" not in outcome.text


async def test_a_json_rpc_error_is_a_protocol_error_observation(shared: Shared) -> None:
    outcome = await shared.router.call(tool_call("demo__protocol_error"), timeout_s=5)
    assert outcome.is_error
    assert (
        outcome.text == "tool `demo__protocol_error` failed: protocol error -32050: deliberate protocol error"
    )


async def test_every_call_carries_run_task_and_trace_context_in_meta(shared: Shared) -> None:
    outcome = await shared.router.call(tool_call("demo__meta"), timeout_s=5)
    meta = json.loads(outcome.text)
    assert meta["agentd/run_id"] == "run-1"
    assert meta["agentd/task_id"] == "task-1"
    assert meta["traceparent"] == TRACEPARENT


async def test_arguments_that_failed_to_parse_are_an_observation_and_not_sent(shared: Shared) -> None:
    call = ToolCall(id="bad", name="demo__add", arguments=None, arguments_error="Expecting value")
    outcome = await shared.router.call(call, timeout_s=5)
    assert outcome.is_error
    assert "Expecting value" in outcome.text


async def test_a_call_past_its_timeout_is_an_observation_and_the_server_is_told(shared: Shared) -> None:
    outcome = await shared.router.call(tool_call("demo__hang", seconds=60, tag="timeout"), timeout_s=0.5)
    assert outcome.is_error
    assert outcome.text.startswith("tool `demo__hang` timed out after 0.5 s")
    await wait_until((shared.sentinels / "cancelled-timeout").exists)


async def test_cancelling_a_call_sends_notifications_cancelled_to_the_server(shared: Shared) -> None:
    async def hang() -> None:
        await shared.router.call(tool_call("demo__hang", seconds=60, tag="cancel"), timeout_s=60)

    async with anyio.create_task_group() as tg:
        tg.start_soon(hang)
        await wait_until((shared.sentinels / "started-cancel").exists)
        tg.cancel_scope.cancel()
    await wait_until((shared.sentinels / "cancelled-cancel").exists)
    # The connection survives a cancelled call.
    assert (
        await shared.router.call(tool_call("demo__echo", text="still here"), timeout_s=5)
    ).text == "still here"


async def test_resource_read_returns_text_and_describes_binary_content(shared: Shared) -> None:
    text = await shared.router.call(tool_call("resource_read", uri="demo://readme"), timeout_s=5)
    blob = await shared.router.call(tool_call("resource_read", uri="demo://logo"), timeout_s=5)
    assert text.text.startswith("# demo")
    assert blob.text == "[blob: image/png, 64 bytes]"
    # The image itself goes with the outcome, for an endpoint that accepts images.
    assert [(i.mime_type, i.size_bytes) for i in blob.images] == [("image/png", 64)]
    assert text.images == ()


async def test_resource_read_goes_to_the_server_that_listed_the_uri(shared: Shared) -> None:
    outcome = await shared.router.call(tool_call("resource_read", uri="paged://item/6"), timeout_s=5)
    assert outcome.text == "body of paged://item/6"


async def test_resource_read_of_an_unknown_uri_is_an_observation(shared: Shared) -> None:
    outcome = await shared.router.call(
        tool_call("resource_read", uri="demo://nope", server="demo"), timeout_s=5
    )
    assert outcome.is_error
    assert "demo://nope" in outcome.text


async def test_resource_read_with_bad_arguments_is_an_observation(shared: Shared) -> None:
    outcome = await shared.router.call(tool_call("resource_read", path="demo://readme"), timeout_s=5)
    assert outcome.is_error
    assert outcome.text.startswith("invalid arguments for `resource_read`: uri:")


async def test_the_catalogue_lists_resources_without_their_bodies(shared: Shared) -> None:
    catalogue = shared.router.resource_catalogue()
    assert '- demo://readme "readme" (text/markdown): What this demo server does.' in catalogue
    assert "A server for the agentd tool-layer tests" not in catalogue


async def test_notes_written_by_the_model_can_be_read_back(shared: Shared) -> None:
    await shared.router.call(tool_call("note_write", text="plan: step 1", mode="replace"), timeout_s=5)
    await shared.router.call(tool_call("note_write", text="fact: 42"), timeout_s=5)
    outcome = await shared.router.call(tool_call("note_read"), timeout_s=5)
    assert outcome.text == "plan: step 1\nfact: 42"


async def test_call_events_describe_arguments_and_results_without_their_content(shared: Shared) -> None:
    await shared.router.call(tool_call("demo__echo", call_id="secret-call", text="hunter2"), timeout_s=5)
    (called,) = shared.events.named("tool.call", call_id="secret-call")
    (result,) = shared.events.named("tool.result", call_id="secret-call")
    assert called["tool"] == "demo__echo"
    assert called["server"] == "demo"
    assert result["is_error"] is False
    assert result["result_len"] == len("hunter2")
    assert {"args_len", "args_hash"} <= called.keys()
    assert "hunter2" not in json.dumps([called, result])


async def test_a_failed_calls_event_names_the_error_kind_not_the_servers_text(shared: Shared) -> None:
    await shared.router.call(tool_call("demo__fail", call_id="failing", message="card 4111"), timeout_s=5)
    (result,) = shared.events.named("tool.result", call_id="failing")
    assert result["is_error"] is True
    assert result["err"] == "tool_error"
    assert "4111" not in json.dumps(result)


async def test_a_resource_template_is_in_the_catalogue_and_readable_through_it(shared: Shared) -> None:
    catalogue = shared.router.resource_catalogue()
    assert '- demo://greeting/{name} (template) "greeting" (text/plain): A greeting for `name`.' in catalogue
    assert catalogue.count("Resources you can read") == 1
    outcome = await shared.router.call(tool_call("resource_read", uri="demo://greeting/ada"), timeout_s=5)
    assert outcome == ToolOutcome("Hello, ada!")
