"""The context window's budget: the fixed part must leave room for a reply, and compaction runs
only when it frees meaningful room."""

from __future__ import annotations

import itertools
from dataclasses import replace

import pytest

from protocol.result import TerminalStatus as S
from subagent.loop import window
from subagent.loop.machine import TurnView, next_action
from subagent.loop.state import CallModel
from subagent.messages import ModelReply, ModelRequest, ToolCall, ToolOutcome, ToolResultMessage, UserMessage
from tests.loop.simulate import call, drive, reply, spec, start


def size(prompt: int, catalogue: int, win: int = 4096, reply_tokens: int = 512) -> window.HeadSize:
    return window.HeadSize(prompt, catalogue, tools=14, window=win, reply_tokens=reply_tokens)


@pytest.mark.parametrize(
    ("head", "fits"),
    [
        pytest.param(size(800, 2000), True, id="room-left"),
        pytest.param(size(800, 2784), True, id="exactly-the-reply-left"),
        pytest.param(size(800, 2785), False, id="one-token-short"),
        pytest.param(size(400, 3400), False, id="the-issue's-case"),
    ],
)
def test_the_fixed_part_must_leave_room_for_a_reply(head: window.HeadSize, fits: bool) -> None:
    assert (window.head_problem(head) is None) is fits


def test_the_problem_names_every_size_and_both_fixes() -> None:
    problem = window.head_problem(size(400, 3400))
    assert problem is not None
    for part in (
        "about 400 tokens",
        "tool catalogue (14 tools) about 3400",
        "3800 together",
        "leaves 296",
        "4096-token window",
        "a reply needs 512",
        "--context-window",
        "tools = [...]",
    ):
        assert part in problem, part


def test_the_reply_room_is_the_endpoints_cap_or_an_eighth_of_the_window() -> None:
    assert window.reply_room(start(context_window=4096).config) == 512
    assert window.reply_room(start(context_window=1024).config) == window.MIN_REPLY_TOKENS
    capped = replace(start().config, max_output_tokens=300)
    assert window.reply_room(capped) == 300


@pytest.mark.parametrize(
    ("transcript_chars", "kept_chars", "worth"),
    [
        pytest.param(40_000, 0, True, id="a-long-transcript"),
        pytest.param(4_000, 0, False, id="a-summary-and-a-little-new-work"),
        pytest.param(40_000, 38_000, False, id="everything-would-be-kept"),
    ],
)
def test_compaction_must_free_a_tenth_of_the_window(
    transcript_chars: int, kept_chars: int, worth: bool
) -> None:
    got = window.worth_compacting(
        transcript_chars=transcript_chars, kept_chars=kept_chars, context_window=16_384
    )
    assert got is worth


def test_results_kept_verbatim_after_compaction_fit_a_quarter_of_the_window() -> None:
    assert window.kept_after_compaction([100] * 8, 5, 128_000) == 5
    assert window.kept_after_compaction([2000] * 8, 5, 2048) == 1  # 500 tokens each, 512 budget
    assert window.kept_after_compaction([9000], 5, 2048) == 0
    assert window.kept_after_compaction([100], 0, 128_000) == 0


def test_a_summary_near_the_mark_is_not_summarised_again() -> None:
    summary = UserMessage("[Summary of the work so far]\n" + "s" * 1500, kind="summary")
    state = replace(start(context_window=2048), transcript=(summary,))
    state = replace(state, chars=state.chars + len(summary.text))
    big_system = TurnView.build(state.config, (spec("t"),), "x" * 4000)
    action = next_action(state, big_system, now=0, cancelled=False)
    assert isinstance(action, CallModel) and action.request.purpose == "turn"


def test_a_forced_compaction_after_an_overflow_still_runs() -> None:
    mid = drive(
        start(limits={"max_steps": 10}), [reply("", call("t", n=1))], {"t": lambda c: ToolOutcome("r")}
    )
    forced = replace(mid.state, terminal=None, force_compaction=True)
    action = next_action(forced, TurnView(), now=0, cancelled=False)
    assert isinstance(action, CallModel) and action.request.purpose == "compact"
    assert action.request.max_output_tokens == window.summary_tokens(forced.config.context_window)


def test_compaction_on_a_small_window_keeps_only_the_results_that_fit() -> None:
    turns = itertools.count()
    results = itertools.count()

    def respond(request: ModelRequest) -> ModelReply:
        if request.purpose == "compact":
            return reply("SUMMARY")
        n = next(turns)
        return reply("done") if n >= 6 else reply("", call("t", cid=f"c{n}", n=n))

    def body(_: ToolCall) -> ToolOutcome:
        return ToolOutcome(f"{next(results):04d}" + "x" * 1900)

    run = drive(start(context_window=2048), respond, {"t": body})
    assert run.terminal is not None and run.terminal.status is S.COMPLETED
    compacted = [r for r in run.requests if r.purpose == "compact"]
    assert compacted
    after = run.requests[run.requests.index(compacted[0]) + 1]
    summary = after.messages[1]
    assert isinstance(summary, UserMessage) and summary.text.count("x" * 1900) == 1
    assert not any(isinstance(m, ToolResultMessage) for m in after.messages)
