"""The scripted model: turns, placeholders, after_end modes, delays, failures, validation."""

from __future__ import annotations

import json
from pathlib import Path

import anyio
import pytest
from pydantic import JsonValue

from agentd.config.bundled import BUNDLED_SCRIPTS_DIR
from protocol.spawn import EndpointSpec, LoopKnobs
from subagent.errors import ContextOverflow, IntelFatal, IntelUnavailable
from subagent.intel import Intelligence, open_intelligence
from subagent.intel.scripted import DEFAULT_SUMMARY, ScriptedModel
from subagent.messages import (
    AssistantMessage,
    Message,
    ModelReply,
    ModelRequest,
    TokenUsage,
    ToolCall,
    ToolResultMessage,
    UserMessage,
)
from tests.intel.conftest import FAST_KNOBS, RecordingSink

pytestmark = pytest.mark.anyio

EXAMPLES = BUNDLED_SCRIPTS_DIR
INSTRUCTION = UserMessage("add 2 and 3")


def write_script(tmp_path: Path, script: JsonValue) -> EndpointSpec:
    path = tmp_path / "script.json"
    path.write_text(json.dumps(script))
    return EndpointSpec(kind="scripted", name="script", script_path=str(path))


def turn(*messages: Message, system: str = "sys") -> ModelRequest:
    return ModelRequest(system=system, messages=(INSTRUCTION, *messages))


async def play(intel: Intelligence, count: int) -> list[ModelReply]:
    return [await intel.complete(turn()) for _ in range(count)]


async def test_the_word_count_script_calls_the_tool_then_reports_its_result() -> None:
    spec = EndpointSpec(kind="scripted", script_path=str(EXAMPLES / "word-count.json"))
    async with open_intelligence([spec], FAST_KNOBS, sink=RecordingSink()) as intel:
        first = await intel.complete(turn())
        assert first.tool_calls == (ToolCall("call_0_0", "demo__word_count", {"text": "add 2 and 3"}),)
        assert first.model == "scripted-demo"
        observed = (
            AssistantMessage("", first.tool_calls),
            ToolResultMessage("call_0_0", "demo__word_count", "4"),
        )
        second = await intel.complete(turn(*observed))
    assert (second.text, second.tool_calls, second.finish_reason) == (
        "The instruction has 4 words.",
        (),
        "stop",
    )


async def test_placeholders_fill_text_and_nested_string_arguments_leaving_other_braces(
    tmp_path: Path,
) -> None:
    script: JsonValue = {
        "turns": [
            {
                "text": 'Task: {instruction}; last: "{last_tool_result}"; json: {"k": 1}',
                "tool_calls": [
                    {"name": "note_write", "arguments": {"text": ["{instruction}"], "n": 1}, "id": "w"}
                ],
            }
        ]
    }
    async with open_intelligence([write_script(tmp_path, script)], FAST_KNOBS, sink=RecordingSink()) as intel:
        reply = await intel.complete(turn())
    assert reply.text == 'Task: add 2 and 3; last: ""; json: {"k": 1}'
    assert reply.tool_calls == (ToolCall("w", "note_write", {"text": ["add 2 and 3"], "n": 1}),)


@pytest.mark.parametrize(
    ("after_end", "texts"),
    [
        pytest.param("repeat_last", ["a", "b", "b", "b"], id="repeat-last"),
        pytest.param("cycle", ["a", "b", "a", "b"], id="cycle"),
    ],
)
async def test_after_end_decides_what_plays_past_the_last_turn(
    tmp_path: Path, after_end: str, texts: list[str]
) -> None:
    spec = write_script(tmp_path, {"turns": [{"text": "a"}, {"text": "b"}], "after_end": after_end})
    async with open_intelligence([spec], FAST_KNOBS, sink=RecordingSink()) as intel:
        assert [r.text for r in await play(intel, 4)] == texts


async def test_after_end_error_is_fatal_script_exhausted(tmp_path: Path) -> None:
    spec = write_script(tmp_path, {"turns": [{"text": "only"}], "after_end": "error"})
    async with open_intelligence([spec], FAST_KNOBS, sink=RecordingSink()) as intel:
        await intel.complete(turn())
        with pytest.raises(IntelFatal, match="script exhausted"):
            await intel.complete(turn())


async def test_compact_requests_return_the_summary_without_advancing_the_script(tmp_path: Path) -> None:
    spec = write_script(
        tmp_path, {"turns": [{"text": "a"}, {"text": "b"}], "summary": "so far: {instruction}"}
    )
    async with open_intelligence([spec], FAST_KNOBS, sink=RecordingSink()) as intel:
        assert (await intel.complete(turn())).text == "a"
        compact = ModelRequest(system="s", messages=(INSTRUCTION,), purpose="compact")
        assert (await intel.complete(compact)).text == "so far: add 2 and 3"
        assert (await intel.complete(turn())).text == "b"


async def test_compact_without_a_summary_returns_the_default(tmp_path: Path) -> None:
    spec = write_script(tmp_path, {"turns": [{"text": "a"}]})
    async with open_intelligence([spec], FAST_KNOBS, sink=RecordingSink()) as intel:
        reply = await intel.complete(ModelRequest(system="s", messages=(INSTRUCTION,), purpose="compact"))
    assert reply.text == DEFAULT_SUMMARY


async def test_refuse_malformed_and_raw_arguments_turns(tmp_path: Path) -> None:
    script: JsonValue = {
        "turns": [
            {"refuse": "no"},
            {"malformed": "garbage"},
            {"tool_calls": [{"name": "demo__add", "raw_arguments": "{broken"}]},
        ]
    }
    async with open_intelligence([write_script(tmp_path, script)], FAST_KNOBS, sink=RecordingSink()) as intel:
        refused, malformed, broken = await play(intel, 3)
    assert refused.refusal == "no"
    assert malformed.malformed == "garbage"
    [call] = broken.tool_calls
    assert (call.id, call.arguments, call.raw_arguments) == ("call_2_0", None, "{broken")
    assert call.arguments_error is not None


async def test_usage_is_estimated_from_chars_unless_overridden(tmp_path: Path) -> None:
    script: JsonValue = {
        "turns": [{"text": "x" * 40}, {"text": "y", "usage": {"tokens_in": 7, "tokens_out": 3}}]
    }
    async with open_intelligence([write_script(tmp_path, script)], FAST_KNOBS, sink=RecordingSink()) as intel:
        estimated = await intel.complete(turn(system="s" * 389))  # 389 + 11 instruction chars = 400
        overridden = await intel.complete(turn())
    assert estimated.usage == TokenUsage(100, 10)
    assert overridden.usage == TokenUsage(7, 3)


async def test_tiny_requests_still_cost_at_least_one_token(tmp_path: Path) -> None:
    async with open_intelligence(
        [write_script(tmp_path, {"turns": [{}]})], FAST_KNOBS, sink=RecordingSink()
    ) as intel:
        reply = await intel.complete(ModelRequest(system="", messages=()))
    assert reply.usage == TokenUsage(1, 1)


@pytest.mark.parametrize(
    ("fail", "error"),
    [
        pytest.param("auth", IntelFatal, id="auth"),
        pytest.param("unavailable", IntelUnavailable, id="unavailable"),
        pytest.param("overflow", ContextOverflow, id="overflow"),
    ],
)
async def test_fail_turns_raise_their_error_for_that_turn_only(
    tmp_path: Path, fail: str, error: type[Exception]
) -> None:
    spec = write_script(tmp_path, {"turns": [{"fail": fail}, {"text": "fine"}]})
    async with open_intelligence([spec], FAST_KNOBS, sink=RecordingSink()) as intel:
        with pytest.raises(error):
            await intel.complete(turn())
        assert (await intel.complete(turn())).text == "fine"


async def test_a_delayed_turn_is_cancellable(tmp_path: Path) -> None:
    spec = write_script(tmp_path, {"turns": [{"text": "late", "delay_s": 3600}]})
    sink = RecordingSink()
    async with open_intelligence([spec], FAST_KNOBS, sink=sink) as intel:
        with anyio.fail_after(5):
            with anyio.move_on_after(0.05) as scope:
                await intel.complete(turn())
    assert scope.cancelled_caught
    assert [e for e, _ in sink.events] == ["intel.call"]


async def test_scripted_calls_emit_call_and_result_events_without_status(tmp_path: Path) -> None:
    sink = RecordingSink()
    async with open_intelligence(
        [write_script(tmp_path, {"turns": [{"text": "a"}]})], FAST_KNOBS, sink=sink
    ) as intel:
        await intel.complete(turn())
    [call] = sink.calls()
    [result] = sink.results()
    assert (call["endpoint"], call["purpose"], call["messages"]) == ("script", "turn", 1)
    assert (result["outcome"], result["status"]) == ("ok", None)


@pytest.mark.parametrize(
    ("content", "problem"),
    [
        pytest.param('{"turns": []}', "turns: List should have at least 1 item", id="no-turns"),
        pytest.param(
            '{"turns": [{"txt": "typo"}]}', "turns.0.txt: Extra inputs are not permitted", id="unknown-key"
        ),
        pytest.param('{"turns": [{"fail": "boom"}]}', "turns.0.fail", id="bad-fail-mode"),
        pytest.param('{"turns": [{"delay_s": -1}]}', "turns.0.delay_s", id="negative-delay"),
        pytest.param(
            '{"turns": [{"tool_calls": [{"name": "x", "arguments": {}, "raw_arguments": "{}"}]}]}',
            "either arguments or raw_arguments",
            id="both-argument-forms",
        ),
        pytest.param(
            '{"turns": [{"text": "secret-content"}], "after_end": "loop"}', "after_end", id="bad-after-end"
        ),
        pytest.param("not json", "(root)", id="not-json"),
    ],
)
async def test_an_invalid_script_is_fatal_naming_the_problem_not_the_content(
    tmp_path: Path, content: str, problem: str
) -> None:
    path = tmp_path / "bad.json"
    path.write_text(content)
    spec = EndpointSpec(kind="scripted", script_path=str(path))
    with pytest.raises(IntelFatal, match="invalid script") as caught:
        async with open_intelligence([spec], FAST_KNOBS, sink=RecordingSink()):
            pass
    assert str(caught.value).startswith(f"invalid script {path}: ")
    assert problem in str(caught.value)
    assert "secret-content" not in str(caught.value)


async def test_a_missing_script_file_is_fatal_naming_the_file(tmp_path: Path) -> None:
    absent = tmp_path / "absent.json"
    spec = EndpointSpec(kind="scripted", script_path=str(absent))
    with pytest.raises(IntelFatal) as caught:
        async with open_intelligence([spec], FAST_KNOBS, sink=RecordingSink()):
            pass
    assert str(caught.value) == f"cannot read the script file {absent}: No such file or directory"


@pytest.mark.parametrize("path", sorted(EXAMPLES.glob("*.json")), ids=lambda p: p.name)
async def test_every_example_script_is_valid(path: Path) -> None:
    spec = EndpointSpec(kind="scripted", script_path=str(path))
    async with open_intelligence([spec], FAST_KNOBS, sink=RecordingSink()):
        pass


async def test_roles_pick_a_script_by_the_runs_instruction(tmp_path: Path) -> None:
    script = {
        "turns": [{"text": "I am the parent"}],
        "roles": [{"match": "^child:", "turns": [{"text": "I am a child of {instruction}"}]}],
    }
    path = tmp_path / "roles.json"
    path.write_text(json.dumps(script))
    spec = EndpointSpec(kind="scripted", script_path=str(path))
    for instruction, expected in (
        ("child: count", "I am a child of child: count"),
        ("plan", "I am the parent"),
    ):
        async with open_intelligence([spec], LoopKnobs(), sink=RecordingSink()) as intel:
            reply = await intel.complete(ModelRequest(system="s", messages=(UserMessage(instruction),)))
        assert reply.text == expected


def test_a_role_with_a_bad_regular_expression_is_rejected_at_open(tmp_path: Path) -> None:
    path = tmp_path / "bad.json"
    path.write_text(
        json.dumps({"turns": [{"text": "x"}], "roles": [{"match": "(", "turns": [{"text": "y"}]}]})
    )
    with pytest.raises(IntelFatal, match="not a valid regular expression"):
        ScriptedModel.open(EndpointSpec(kind="scripted", script_path=str(path)))
