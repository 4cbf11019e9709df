"""Terminal statuses become exit codes exactly as docs/design.md §12 says; result text is capped with a marker;
a cancel outranks the deadline; usages add up counter by counter."""

from __future__ import annotations

import itertools

import pytest
from hypothesis import given
from hypothesis import strategies as st

from protocol.exit_codes import ExitCode
from protocol.result import (
    RESULT_TEXT_CAP,
    TRUNCATION_MARKER,
    AbortKind,
    RunResult,
    RunUsage,
    TerminalStatus,
    cap_text,
    exit_code,
    interrupted_status,
)

S = TerminalStatus


def test_terminal_statuses_are_the_closed_set_of_nine() -> None:
    assert {s.value for s in S} == {
        "completed",
        "refused",
        "exhausted_steps",
        "exhausted_tokens",
        "deadline",
        "stalled",
        "loop_detected",
        "cancelled",
        "crashed",
    }


def test_exit_code_numbers_match_design_section_12_and_docs_exit_codes() -> None:
    assert {c.name: c.value for c in ExitCode} == {
        "OK": 0,
        "FAILURE": 1,
        "USAGE": 2,
        "PARTIAL": 3,
        "INTELLIGENCE": 4,
        "REFUSED": 5,
        "MCP": 6,
        "BUDGET": 7,
        "DEADLINE": 124,
        "INTERRUPTED": 130,  # Ctrl-C in a client command (docs/exit-codes.md)
    }


@pytest.mark.parametrize(
    ("status", "partial", "abort", "clean_drain", "expected"),
    [
        pytest.param(S.COMPLETED, False, None, False, 0, id="completed"),
        pytest.param(S.COMPLETED, True, None, False, 0, id="completed-with-partial"),
        pytest.param(S.REFUSED, False, None, False, 5, id="refused"),
        pytest.param(S.REFUSED, True, None, False, 5, id="refused-with-partial"),
        pytest.param(S.EXHAUSTED_STEPS, True, None, False, 3, id="exhausted-steps-with-partial"),
        pytest.param(S.EXHAUSTED_STEPS, False, None, False, 7, id="exhausted-steps-without-partial"),
        pytest.param(S.EXHAUSTED_TOKENS, True, None, False, 3, id="exhausted-tokens-with-partial"),
        pytest.param(S.EXHAUSTED_TOKENS, False, None, False, 7, id="exhausted-tokens-without-partial"),
        pytest.param(S.DEADLINE, False, None, False, 124, id="deadline"),
        pytest.param(S.DEADLINE, True, None, False, 124, id="deadline-with-partial"),
        pytest.param(S.STALLED, True, None, False, 3, id="stalled-with-partial"),
        pytest.param(S.STALLED, False, None, False, 1, id="stalled-without-partial"),
        pytest.param(S.LOOP_DETECTED, True, None, False, 3, id="loop-detected-with-partial"),
        pytest.param(S.LOOP_DETECTED, False, None, False, 1, id="loop-detected-without-partial"),
        pytest.param(S.CANCELLED, False, None, True, 0, id="cancelled-on-clean-drain"),
        pytest.param(S.CANCELLED, True, None, True, 0, id="cancelled-with-partial-on-clean-drain"),
        pytest.param(S.CANCELLED, False, None, False, 1, id="cancelled-without-clean-drain"),
        pytest.param(S.CANCELLED, True, None, False, 1, id="cancelled-with-partial-without-clean-drain"),
        pytest.param(S.CRASHED, False, None, False, 1, id="crashed"),
        pytest.param(S.CRASHED, True, None, False, 1, id="crashed-with-partial"),
        pytest.param(S.CRASHED, False, None, True, 1, id="crashed-during-clean-drain"),
        pytest.param(S.CRASHED, False, "intelligence", False, 4, id="intelligence-abort"),
        pytest.param(S.CRASHED, False, "mcp", False, 6, id="required-mcp-abort"),
        pytest.param(S.CRASHED, True, "intelligence", False, 4, id="intelligence-abort-with-partial"),
        pytest.param(S.COMPLETED, False, "intelligence", False, 4, id="intelligence-abort-overrides-status"),
        pytest.param(S.EXHAUSTED_STEPS, True, "mcp", False, 6, id="mcp-abort-overrides-partial"),
        pytest.param(S.CANCELLED, False, "mcp", True, 6, id="mcp-abort-overrides-clean-drain"),
    ],
)
def test_exit_code_follows_the_design_table(
    status: TerminalStatus, partial: bool, abort: AbortKind | None, clean_drain: bool, expected: int
) -> None:
    result = RunResult(status=status, partial=partial, abort=abort)
    assert exit_code(result, clean_drain=clean_drain) == expected


def test_every_outcome_maps_to_an_exit_code() -> None:
    aborts: list[AbortKind | None] = [None, "intelligence", "mcp"]
    for status, partial, abort, clean_drain in itertools.product(S, [False, True], aborts, [False, True]):
        result = RunResult(status=status, partial=partial, abort=abort)
        code = exit_code(result, clean_drain=clean_drain)
        assert isinstance(code, ExitCode), result
        assert code != ExitCode.USAGE, "a usage error is decided before any run, never from a result"


# ---- cap_text ----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "text",
    [
        pytest.param("", id="empty"),
        pytest.param("short answer", id="short"),
        pytest.param("x" * RESULT_TEXT_CAP, id="exactly-the-cap"),
    ],
)
def test_cap_text_keeps_text_within_the_cap(text: str) -> None:
    assert cap_text(text) == text


def test_cap_text_cuts_long_text_to_exactly_the_cap_with_the_marker() -> None:
    text = "y" * (RESULT_TEXT_CAP + 1)
    capped = cap_text(text)
    assert len(capped) == RESULT_TEXT_CAP
    assert capped.endswith(TRUNCATION_MARKER)
    assert capped == text[: RESULT_TEXT_CAP - len(TRUNCATION_MARKER)] + TRUNCATION_MARKER


@given(text=st.text(max_size=300), limit=st.integers(min_value=0, max_value=200))
def test_cap_text_never_exceeds_the_limit_and_keeps_a_prefix(text: str, limit: int) -> None:
    capped = cap_text(text, limit)
    assert len(capped) == min(len(text), limit)
    if len(text) <= limit:
        assert capped == text
    elif limit >= len(TRUNCATION_MARKER):
        assert capped.endswith(TRUNCATION_MARKER)
        assert text.startswith(capped[: limit - len(TRUNCATION_MARKER)])
    else:
        assert text.startswith(capped)


# ---- interrupted_status ------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("cancelled", "past_deadline", "expected"),
    [
        pytest.param(False, False, None, id="running"),
        pytest.param(True, False, S.CANCELLED, id="cancelled"),
        pytest.param(False, True, S.DEADLINE, id="past-the-deadline"),
        pytest.param(True, True, S.CANCELLED, id="cancelled-beats-deadline"),
    ],
)
def test_a_cancel_outranks_the_deadline(cancelled: bool, past_deadline: bool, expected: S | None) -> None:
    assert interrupted_status(cancelled=cancelled, past_deadline=past_deadline) is expected


# ---- RunUsage ----------------------------------------------------------------------------------

counts = st.integers(min_value=0, max_value=10**12)
usages = st.builds(
    RunUsage, tokens_in=counts, tokens_out=counts, steps=counts, model_calls=counts, tool_calls=counts
)


@given(a=usages, b=usages)
def test_adding_usages_sums_every_counter(a: RunUsage, b: RunUsage) -> None:
    total = a + b
    for name in RunUsage.model_fields:
        assert getattr(total, name) == getattr(a, name) + getattr(b, name)
    assert total.tokens == a.tokens + b.tokens


@given(parts=st.lists(usages, max_size=6))
def test_a_sum_of_usages_starts_from_nothing_and_ignores_order(parts: list[RunUsage]) -> None:
    assert sum(parts, RunUsage()) == sum(reversed(parts), RunUsage())
    assert sum(parts, RunUsage()).steps == sum(u.steps for u in parts)
    assert RunUsage() + RunUsage(steps=2) == RunUsage(steps=2)
