"""The delegation self-tools turn into `sup/*` requests; refusals and failures are observations."""

from __future__ import annotations

import json

import anyio
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from pydantic import JsonValue

from protocol import control
from subagent.messages import ToolOutcome
from subagent.tools import delegate

pytestmark = pytest.mark.anyio


class Supervisor:
    """Records requests and answers with a canned response (or never, or an error)."""

    def __init__(
        self, response: JsonValue = None, *, hang: bool = False, fail: Exception | None = None
    ) -> None:
        self.response = response
        self.hang = hang
        self.fail = fail
        self.requests: list[tuple[str, dict[str, JsonValue]]] = []

    async def request(self, method: str, params: dict[str, JsonValue]) -> JsonValue:
        self.requests.append((method, params))
        if self.fail is not None:
            raise self.fail
        if self.hang:
            await anyio.sleep_forever()
        return self.response


async def test_spawn_maps_arguments_and_names_tools_as_the_supervisor_does() -> None:
    sup = Supervisor({"handle": "0.1", "status": "completed", "result": "42"})
    outcome = await delegate.call(
        "subagent_spawn",
        {
            "instruction": "count",
            "context": "facts",
            "tools": ["fs__read", "web"],
            "max_steps": 3,
            "output_schema": {"type": "object"},
            "wait": True,
            "handle": "0.9",
            "depth": 0,
        },
        sup.request,
        timeout_s=5,
        canonical=lambda n: "fs/read" if n == "fs__read" else n,
    )
    assert not outcome.is_error
    assert json.loads(outcome.text)["result"] == "42"
    method, params = sup.requests[0]
    assert method == "sup/spawn"
    assert params["tool_scope"] == ["fs/read", "web"]
    assert params["context_seed"] == [{"role": "user", "content": "facts"}]
    assert params["output_contract"] == {"format": "json", "schema": {"type": "object"}}
    assert params["limits"] == {"max_steps": 3, "max_tokens": None, "deadline_s": None}
    assert "handle" not in params
    assert "depth" not in params


async def test_a_refusal_is_an_error_observation_naming_the_cap() -> None:
    sup = Supervisor({"refused": "depth cap 4 reached (node 0.1.1.1.1 is at depth 4)"})
    outcome = await delegate.call("subagent_spawn", {"instruction": "x"}, sup.request, timeout_s=5)
    assert outcome.is_error
    assert outcome.text == "`subagent_spawn` refused: depth cap 4 reached (node 0.1.1.1.1 is at depth 4)"


@pytest.mark.parametrize(
    ("tool", "method"),
    [("subagent_wait", "sup/wait"), ("subagent_status", "sup/status"), ("subagent_cancel", "sup/cancel")],
)
async def test_handle_tools_map_to_their_request(tool: str, method: str) -> None:
    sup = Supervisor({"handle": "0.2", "state": "running"})
    outcome = await delegate.call(tool, {"handle": "0.2"}, sup.request, timeout_s=5)
    assert not outcome.is_error
    assert sup.requests[0] == (method, {"handle": "0.2", "timeout_s": None})


async def test_bad_arguments_never_reach_the_supervisor() -> None:
    sup = Supervisor()
    outcome = await delegate.call("subagent_spawn", {"instruction": ""}, sup.request, timeout_s=5)
    assert outcome.is_error
    assert "invalid arguments for `subagent_spawn`" in outcome.text
    assert sup.requests == []


async def test_a_request_that_outlives_the_time_left_is_an_observation() -> None:
    outcome = await delegate.call(
        "subagent_wait", {"handle": "0.1"}, Supervisor(hang=True).request, timeout_s=0.05
    )
    assert outcome.is_error
    assert "timed out" in outcome.text


async def test_a_closed_channel_is_an_observation() -> None:
    sup = Supervisor(fail=ConnectionError("control channel closed"))
    outcome = await delegate.call("subagent_status", {"handle": "0.1"}, sup.request, timeout_s=5)
    assert outcome.is_error
    assert "control channel closed" in outcome.text


OBJECT_N: dict[str, JsonValue] = {
    "type": "object",
    "properties": {"n": {"type": "integer"}},
    "required": ["n"],
}


async def test_an_invalid_output_schema_is_refused_here_before_the_supervisor_is_asked() -> None:
    sup = Supervisor({"handle": "0.1", "state": "running"})
    outcome = await delegate.call(
        "subagent_spawn",
        {"instruction": "x", "output_schema": {"type": "no-such-type"}},
        sup.request,
        timeout_s=5,
        schemas={},
    )
    assert outcome.is_error
    assert outcome.text.startswith(
        "`subagent_spawn` refused: output_contract.schema is not a valid JSON Schema"
    )
    assert sup.requests == []


@pytest.mark.parametrize(
    ("result", "checked"),
    [
        pytest.param({"n": 1}, {"schema_valid": True}, id="valid"),
        pytest.param(
            {"n": "one"},
            {"schema_valid": False, "schema_errors": ["n: 'one' is not of type 'integer'"]},
            id="invalid",
        ),
    ],
)
async def test_a_childs_result_is_checked_against_its_schema_by_the_parent(
    result: JsonValue, checked: dict[str, JsonValue]
) -> None:
    distillate: dict[str, JsonValue] = {"handle": "0.1", "status": "completed", "result": result}
    schemas: delegate.Schemas = {}
    outcome = await delegate.call(
        "subagent_spawn",
        {"instruction": "x", "output_schema": OBJECT_N},
        Supervisor(distillate).request,
        timeout_s=5,
        schemas=schemas,
    )
    assert json.loads(outcome.text) == {**distillate, **checked}
    assert schemas == {"0.1": OBJECT_N}


async def test_a_background_childs_distillate_is_checked_when_waited_for() -> None:
    schemas: delegate.Schemas = {}
    started = Supervisor({"handle": "0.1", "state": "running", "grant": {"max_steps": 1, "max_tokens": 9}})
    outcome = await delegate.call(
        "subagent_spawn",
        {"instruction": "x", "output_schema": OBJECT_N, "wait": False},
        started.request,
        timeout_s=5,
        schemas=schemas,
    )
    assert "schema_valid" not in json.loads(outcome.text)
    done = Supervisor({"handle": "0.1", "status": "completed", "result": {"n": "x"}})
    waited = await delegate.call(
        "subagent_wait", {"handle": "0.1"}, done.request, timeout_s=5, schemas=schemas
    )
    assert json.loads(waited.text)["schema_valid"] is False
    # A child without a schema, or one that brought back no result, is passed on as it came.
    other: dict[str, JsonValue] = {"handle": "0.2", "status": "crashed", "result": None}
    unchecked = await delegate.call(
        "subagent_wait", {"handle": "0.2"}, Supervisor(other).request, timeout_s=5, schemas=schemas
    )
    assert json.loads(unchecked.text) == other


@pytest.mark.parametrize("tool", ["subagent_wait", "subagent_status", "subagent_cancel"])
async def test_a_handle_the_model_made_up_is_an_observation_and_never_a_request(tool: str) -> None:
    # A small model wrote this one (a tool's name and a user id as the handle).
    sup = Supervisor({"handle": "0.1", "state": "running"})
    outcome = await delegate.call(
        tool, {"handle": "files__stat_cant_be_completed_by_user_id_4000"}, sup.request, timeout_s=5
    )
    assert outcome.is_error
    assert outcome.text.startswith(f"invalid arguments for `{tool}`: handle:")
    assert "not a handle subagent_spawn returned (handles look like 0.1 or 0.1.2)" in outcome.text
    assert sup.requests == []


async def test_spawn_arguments_the_control_channel_would_refuse_are_an_observation() -> None:
    # The tool's own arguments allow any tool name; a spawn request's scope holds names of at most
    # 200 characters. The request is checked as the channel checks it, before it is sent.
    sup = Supervisor({"handle": "0.1", "status": "completed", "result": "x"})
    outcome = await delegate.call(
        "subagent_spawn", {"instruction": "go", "tools": ["t" * 201]}, sup.request, timeout_s=5
    )
    assert outcome.is_error
    assert outcome.text.startswith("invalid arguments for `subagent_spawn`: tool_scope.0:")
    assert sup.requests == []


# Whatever a model writes as a delegation tool's arguments: JSON values, and the tool's own keys
# among them so that some calls get past the tool's own checks.
_JSON = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=30),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=10), inner, max_size=4),
    max_leaves=12,
)
_KEYS = st.sampled_from(["instruction", "context", "tools", "output_schema", "max_steps", "handle", "wait"])
_ARGUMENTS = st.dictionaries(_KEYS | st.text(max_size=10), _JSON, max_size=6)


@settings(max_examples=300)
@given(tool=st.sampled_from(list(delegate.TOOLS)), arguments=_ARGUMENTS)
def test_whatever_the_model_writes_is_an_outcome_and_only_a_frame_the_channel_carries_is_sent(
    tool: str, arguments: dict[str, JsonValue]
) -> None:
    sup = Supervisor({"handle": "0.1", "status": "completed", "result": "x"})

    async def one_call() -> ToolOutcome:
        return await delegate.call(tool, arguments, sup.request, timeout_s=5)

    outcome = anyio.run(one_call)
    assert isinstance(outcome.text, str)
    for method, params in sup.requests:
        # What the subagent's channel builds before it writes the frame (subagent/channel.py).
        control.UP_ADAPTER.validate_python({"jsonrpc": "2.0", "id": 1, "method": method, "params": params})
