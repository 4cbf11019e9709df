"""A warm session's turns, purely (subagent/loop/session.py): per-delivery budgets capped by the
session's remainder, one user turn per delivery, a finished turn folded back into a well-formed
transcript, and compaction bounding the transcript across many turns without losing the current
delivery."""

from __future__ import annotations

import pytest

from protocol.result import RunUsage
from protocol.result import TerminalStatus as S
from protocol.spawn import Limits, WarmSpec
from subagent.loop import session
from subagent.loop.machine import TurnView, next_action, on_model_reply
from subagent.loop.state import CallModel, Terminal
from subagent.messages import AssistantMessage, ModelRequest, ToolOutcome, ToolResultMessage, UserMessage
from tests.loop.simulate import call, check_invariants, drive, reply, spec, start

SPEC = WarmSpec(turn_max_steps=5, turn_max_tokens=1000, turn_deadline_s=60.0)


def bounds(used: RunUsage | None = None, limits: Limits | None = None) -> session.TurnBounds:
    return session.turn_bounds(
        SPEC, limits or Limits(max_tokens=100_000), used or RunUsage(), session_deadline=1000.0, now=0.0
    )


@pytest.mark.parametrize(
    ("used", "limits", "expected"),
    [
        pytest.param(RunUsage(), Limits(max_tokens=100_000), (5, 1000, False), id="delivery-budget"),
        pytest.param(
            RunUsage(tokens_in=99_500), Limits(max_tokens=100_000), (5, 500, True), id="session-remainder"
        ),
        pytest.param(RunUsage(tokens_in=200_000), Limits(max_tokens=100_000), (5, 1, True), id="spent"),
    ],
)
def test_a_turns_token_budget_is_the_deliverys_capped_by_the_sessions_remainder(
    used: RunUsage, limits: Limits, expected: tuple[int, int, bool]
) -> None:
    got = bounds(used, limits)
    assert (got.max_steps, got.max_tokens, got.session_tokens) == expected


def test_a_turns_deadline_never_passes_the_sessions() -> None:
    got = session.turn_bounds(SPEC, Limits(), RunUsage(), session_deadline=30.0, now=0.0)
    assert got.deadline == 30.0


def test_each_delivery_is_one_user_turn_and_the_answers_carry_over() -> None:
    state = start()
    for n in range(3):
        state = session.begin_turn(state, f"change {n}", bounds())
        run = drive(state, [reply(f"answer {n}")])
        assert run.terminal is not None and run.terminal.status is S.COMPLETED
        state = session.end_turn(run.state, run.terminal)
        check_invariants(state)
    texts = [m.text for m in state.transcript]
    assert texts == ["change 0", "answer 0", "change 1", "answer 1", "change 2", "answer 2"]
    assert [m.kind for m in state.transcript if isinstance(m, UserMessage)] == ["inject"] * 3
    assert state.budgets.used == RunUsage()  # the driver keeps the session's sum


def test_a_turn_that_ran_out_of_steps_is_closed_so_the_next_request_is_well_formed() -> None:
    state = session.begin_turn(start(), "change", session.TurnBounds(1, 1000, 60.0, False, False))
    run = drive(state, [reply("looking", call("t", n=1))], {"t": lambda c: ToolOutcome("x")})
    assert run.terminal is not None and run.terminal.status is S.EXHAUSTED_STEPS
    closed = session.end_turn(run.state, run.terminal)
    check_invariants(closed)
    last = closed.transcript[-1]
    assert isinstance(last, AssistantMessage) and last.text.startswith("[this turn ended: exhausted_steps]")
    # Every tool call in the transcript has its result before the next delivery is appended.
    calls = {c.id for m in closed.transcript if isinstance(m, AssistantMessage) for c in m.tool_calls}
    results = {m.call_id for m in closed.transcript if isinstance(m, ToolResultMessage)}
    assert calls <= results


def test_pending_calls_of_an_interrupted_turn_get_error_results() -> None:
    state = session.begin_turn(start(), "change", bounds())
    action = next_action(state, TurnView(tools=(spec("t"),)), now=0.0, cancelled=False)
    assert isinstance(action, CallModel)
    state = on_model_reply(state, action, reply("", call("t", cid="c9")), now=0.0, cancelled=False)
    assert state.pending is not None
    closed = session.end_turn(state, Terminal(S.DEADLINE))
    check_invariants(closed)
    result = closed.transcript[-2]
    assert isinstance(result, ToolResultMessage) and result.call_id == "c9" and result.is_error
    assert closed.pending is None


def test_compaction_keeps_the_transcript_bounded_across_turns_and_the_delivery_verbatim() -> None:
    def respond(request: ModelRequest) -> object:
        if request.purpose == "compact":
            return reply("SUMMARY of earlier changes", usage=(100, 10))
        return reply("handled " + "y" * 1500)

    state = start(context_window=2048)
    sizes = []
    for n in range(12):
        state = session.begin_turn(state, f"change {n} " + "x" * 600, bounds())
        run = drive(state, respond)  # type: ignore[arg-type]
        assert run.terminal is not None and run.terminal.status is S.COMPLETED
        for request in run.requests:
            if request.purpose == "turn":
                # Whatever was compacted, the delivery being handled is in the request verbatim.
                assert any(m.text.startswith(f"change {n} ") for m in request.messages)
        state = session.end_turn(run.state, run.terminal)
        check_invariants(state)
        sizes.append(state.chars)
    assert state.compactions >= 2
    assert max(sizes) < 2048 * 4  # bounded by the window, not growing with the number of turns


@pytest.mark.parametrize(
    ("used", "now", "expected"),
    [
        pytest.param(RunUsage(), 0.0, None, id="room-left"),
        pytest.param(RunUsage(tokens_in=1000), 0.0, S.EXHAUSTED_TOKENS, id="tokens"),
        pytest.param(RunUsage(steps=10), 0.0, S.EXHAUSTED_STEPS, id="steps"),
        pytest.param(RunUsage(), 50.0, S.DEADLINE, id="lifetime"),
    ],
)
def test_the_sessions_own_budget(used: RunUsage, now: float, expected: S | None) -> None:
    limits = Limits(max_tokens=1000, max_steps=10)
    assert session.session_stop(used, limits, session_deadline=50.0, now=now) is expected


def test_only_a_budget_the_sessions_remainder_set_spends_the_session() -> None:
    own = session.TurnBounds(5, 1000, 60.0, session_steps=False, session_tokens=False)
    capped = session.TurnBounds(5, 10, 60.0, session_steps=False, session_tokens=True)
    assert session.spent_by_turn(S.EXHAUSTED_TOKENS, own) is None
    assert session.spent_by_turn(S.EXHAUSTED_TOKENS, capped) is S.EXHAUSTED_TOKENS
    assert session.spent_by_turn(S.COMPLETED, capped) is None


def test_a_transcript_the_turn_budget_cannot_carry_is_dropped_before_the_delivery() -> None:
    state = session.begin_turn(start(), "old change", bounds())
    state = session.end_turn(state, Terminal(S.COMPLETED, result="z" * 3000))
    state = session.begin_turn(state, "new change", bounds())
    assert [m.kind for m in state.transcript if isinstance(m, UserMessage)] == ["summary", "inject"]
    assert state.transcript[-1].text == "new change"
    assert [n.fields["how"] for n in state.notes] == ["mechanical"]
    check_invariants(state)
    run = drive(state, [reply("fine")])
    assert run.terminal is not None and run.terminal.status is S.COMPLETED
