"""The server's pure parts: task URIs, progress lines, tool arguments, the tool catalogue."""

from __future__ import annotations

import mcp_types as types
import pytest
from pydantic import JsonValue, ValidationError

from mcp_serve.arguments import ListArguments, SubmitArguments, TaskArguments, problem, task_spec
from mcp_serve.catalogue import TOOLS
from mcp_serve.elicitation import DEFAULT_REASON, Decision, decision, question
from mcp_serve.views import ProgressTally, parse_task_uri, result_uri, task_uri
from protocol.api import EventView


@pytest.mark.parametrize(
    ("uri", "parsed"),
    [
        pytest.param("agentd://tasks/t_01AB", ("t_01AB", False), id="task"),
        pytest.param("agentd://tasks/t_01AB/result", ("t_01AB", True), id="result"),
        pytest.param("agentd://tasks/t_01AB/other", None, id="unknown-tail"),
        pytest.param("agentd://tasks/", None, id="no-id"),
        pytest.param("agentd://tasks/../etc", None, id="not-an-id"),
        pytest.param("agentd://approvals", None, id="approvals-is-not-a-task"),
        pytest.param("file:///tasks/t1", None, id="other-scheme"),
    ],
)
def test_a_task_uri_names_the_task_and_whether_it_is_the_result(uri: str, parsed: object) -> None:
    assert parse_task_uri(uri) == parsed


def test_the_uris_a_submit_returns_parse_back() -> None:
    assert parse_task_uri(task_uri("t_9")) == ("t_9", False)
    assert parse_task_uri(result_uri("t_9")) == ("t_9", True)


def _event(seq: int, name: str, **fields: JsonValue) -> EventView:
    return EventView(seq=seq, ts=0.0, event=name, fields=fields)


def test_progress_lines_count_steps_tool_calls_and_tokens_across_the_tree() -> None:
    tally = ProgressTally()
    lines = [
        tally.line(_event(1, "subagent.ready", handle="0")),
        tally.line(_event(2, "intel.call", handle="0")),
        tally.line(_event(3, "tool.call", handle="0", tool="demo__echo")),
        tally.line(_event(4, "loop.step", handle="0", step=1, tokens_in=100, tokens_out=5)),
        tally.line(_event(5, "subagent.spawn", handle="0.1")),
        tally.line(_event(6, "loop.step", handle="0.1", step=1, tokens_in=40, tokens_out=2)),
    ]
    assert lines == [
        "started · 0 steps, 0 tool calls, 0 tokens",
        None,
        "tool call demo__echo · 0 steps, 1 tool call, 0 tokens",
        "step 1 done · 1 step, 1 tool call, 105 tokens",
        "subagent 0.1 started · 1 step, 1 tool call, 105 tokens",
        "subagent 0.1: step done · 2 steps, 1 tool call, 147 tokens",
    ]
    assert tally.reported == 5


def test_task_arguments_become_the_spec_they_ask_for() -> None:
    arguments = TaskArguments(
        instruction="sum it",
        model="fast",
        mcp_servers=["demo"],
        max_steps=3,
        deadline_s=60,
        output_schema={"type": "object"},
    )
    spec = task_spec(arguments)
    assert (spec.instruction, spec.model, spec.mcp) == ("sum it", "fast", ["demo"])
    assert (spec.limits.max_steps, spec.limits.max_tokens, spec.limits.deadline_s) == (3, None, 60)
    assert (spec.output_contract.format, spec.output_contract.schema_) == ("json", {"type": "object"})
    assert task_spec(TaskArguments(instruction="x")).output_contract.format == "text"


@pytest.mark.parametrize(
    ("model", "raw", "named"),
    [
        pytest.param(TaskArguments, {}, "instruction", id="missing-instruction"),
        pytest.param(TaskArguments, {"instruction": "x", "max_steps": 0}, "max_steps", id="zero-steps"),
        pytest.param(TaskArguments, {"instruction": "x", "budget": 3}, "budget", id="unknown-argument"),
        pytest.param(
            SubmitArguments, {"instruction": "x", "idempotency_key": ""}, "idempotency_key", id="empty-key"
        ),
        pytest.param(ListArguments, {"limit": 1000}, "limit", id="page-too-large"),
    ],
)
def test_refused_arguments_name_the_argument(
    model: type[TaskArguments], raw: dict[str, object], named: str
) -> None:
    with pytest.raises(ValidationError) as refused:
        model.model_validate(raw)
    assert problem(refused.value).startswith(f"{named}: ")


def test_a_spec_bound_the_arguments_do_not_check_is_named_too() -> None:
    with pytest.raises(ValidationError) as refused:
        task_spec(TaskArguments(instruction="x", model="not a name"))
    assert problem(refused.value).startswith("model: ")


def test_every_tool_has_a_description_and_an_object_input_schema() -> None:
    for tool in TOOLS:
        assert tool.description and len(tool.description) > 40, tool.name
        assert tool.input_schema["type"] == "object", tool.name
        assert tool.input_schema.get("additionalProperties") is False, tool.name


@pytest.mark.parametrize(
    ("answer", "decided"),
    [
        pytest.param(
            types.ElicitResult(action="accept", content={"approve": True}), Decision(True), id="approve"
        ),
        pytest.param(
            types.ElicitResult(action="accept", content={"approve": False, "reason": " no "}),
            Decision(False, "no"),
            id="refuse-with-reason",
        ),
        pytest.param(
            types.ElicitResult(action="accept", content={"approve": False}),
            Decision(False, DEFAULT_REASON),
            id="refuse-without-reason",
        ),
        pytest.param(types.ElicitResult(action="decline"), Decision(False, DEFAULT_REASON), id="decline"),
        pytest.param(types.ElicitResult(action="cancel"), None, id="dismissed-decides-nothing"),
    ],
)
def test_the_persons_answer_decides_the_call(answer: types.ElicitResult, decided: Decision | None) -> None:
    assert decision(answer) == decided


def test_the_question_names_the_task_the_tool_its_server_and_arguments() -> None:
    fields: dict[str, JsonValue] = {
        "handle": "0.1",
        "tool": "echo",
        "server": "demo",
        "arguments": '{"text":"hi"}',
    }
    asked = question("t_1", fields)
    assert asked.startswith("subagent 0.1 of agentd task t_1 wants to call echo on MCP server demo")
    assert '{"text":"hi"}' in asked
