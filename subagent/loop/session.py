"""A warm session's turns (docs/warm-sessions.md): how one delivery starts a turn of the loop, how a
finished turn is folded back into the transcript, and when the session itself is spent.

Pure: the driver (subagent/session.py) supplies time and the session's usage so far. A turn is an
ordinary run of the loop machine under the delivery's budgets; between turns the transcript, the
tool mode and the compaction count carry over, and everything that judges one run's progress
(budgets used, repeats, idle turns, the partial) starts afresh.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, replace

from protocol.result import RunUsage, TerminalStatus
from protocol.spawn import Limits, WarmSpec
from subagent.loop import context
from subagent.loop.machine import message_chars
from subagent.loop.state import Budgets, LoopState, Note, Terminal
from subagent.messages import AssistantMessage, Message, ToolResultMessage, UserMessage, estimate_tokens

TURN_ENDED_OBSERVATION = "the call did not complete: the turn ended first"


@dataclass(frozen=True, slots=True)
class TurnBounds:
    """The budgets one turn runs under, and which of them the session's remainder set."""

    max_steps: int
    max_tokens: int
    deadline: float
    # The session's remainder was smaller than the delivery's own budget: spending it ends the session.
    session_steps: bool
    session_tokens: bool


def turn_bounds(
    spec: WarmSpec, limits: Limits, used: RunUsage, *, session_deadline: float, now: float
) -> TurnBounds:
    """The next turn's budgets: the delivery's own, capped by what the session has left."""
    steps_left = max(1, limits.max_steps - used.steps)
    tokens_left = max(1, limits.max_tokens - used.tokens)
    return TurnBounds(
        max_steps=min(spec.turn_max_steps, steps_left),
        max_tokens=min(spec.turn_max_tokens, tokens_left),
        deadline=min(now + spec.turn_deadline_s, session_deadline),
        session_steps=steps_left < spec.turn_max_steps,
        session_tokens=tokens_left < spec.turn_max_tokens,
    )


# A turn's request must leave room in its token budget. Past a quarter of it, the turn starts with
# a summary call (lever 2); past a half, there is no room for that call and the turn: the old
# transcript is dropped mechanically before the delivery is appended.
SUMMARY_SHARE = 4
DROP_SHARE = 2


def begin_turn(state: LoopState, message: str, bounds: TurnBounds, *, overhead_chars: int = 0) -> LoopState:
    """Append the delivery as one user turn and reset the per-run judgements for it.

    `overhead_chars`: the system prompt and tool catalogue as sent, for the request's estimate.
    The transcript is compacted first when the turn's token budget could not carry it (above).
    """
    inject = UserMessage(message, kind="inject")
    estimate = estimate_tokens(overhead_chars + state.chars + message_chars(inject))
    transcript, chars, verbatim = state.transcript, state.chars, state.verbatim
    compactions, force = state.compactions, False
    notes: tuple[Note, ...] = ()
    if _compactable(transcript) and estimate * DROP_SHARE >= bounds.max_tokens:
        before = len(transcript)
        transcript = context.mechanical_compaction(transcript, 0)
        chars = sum(message_chars(m) for m in (*state.head, *transcript))
        verbatim, compactions = (), compactions + 1
        notes = (
            Note("loop.compact", {"how": "mechanical", "messages_before": before, "why": "turn_budget"}),
        )
    elif _compactable(transcript) and estimate * SUMMARY_SHARE >= bounds.max_tokens:
        force = True
    config = replace(
        state.config, max_steps=bounds.max_steps, max_tokens=bounds.max_tokens, deadline=bounds.deadline
    )
    return replace(
        state,
        config=config,
        transcript=(*transcript, inject),
        chars=chars + message_chars(inject),
        verbatim=verbatim,
        compactions=compactions,
        # The last call's prompt tokens stay: they are the next estimate's ground truth.
        budgets=Budgets(last_call=state.budgets.last_call),
        repeats={},
        last_signature=None,
        idle_turns=0,
        vacuous_reasks_used=0,
        parrot_reasks_used=0,
        pending=None,
        pending_text="",
        partial=None,
        force_compaction=force,
        overflow_retried=False,
        notes=notes,
        terminal=None,
        turn_message=inject,
    )


def _compactable(transcript: tuple[Message, ...]) -> bool:
    """Something to gain: more than a lone summary of earlier turns."""
    if not transcript:
        return False
    only = transcript[0]
    return len(transcript) > 1 or not (isinstance(only, UserMessage) and only.kind == "summary")


def end_turn(state: LoopState, terminal: Terminal) -> LoopState:
    """Fold a finished turn into the transcript, so the next request is well formed and the model
    remembers what it answered: every tool call left pending gets an error result, and the turn's
    answer closes it as an assistant message when the transcript does not already end with it."""
    added: list[Message] = []
    if state.pending is not None:
        added.extend(
            ToolResultMessage(p.call.id, p.call.name, TURN_ENDED_OBSERVATION, is_error=True)
            for p in state.pending
        )
    last = state.transcript[-1] if state.transcript else None
    answered = isinstance(last, AssistantMessage) and not last.tool_calls
    if added or not answered:
        added.append(AssistantMessage(closing_text(terminal)))
    return replace(
        state,
        transcript=(*state.transcript, *added),
        chars=state.chars + sum(message_chars(m) for m in added),
        budgets=Budgets(last_call=state.budgets.last_call),
        pending=None,
        pending_text="",
        terminal=None,
        turn_message=None,
        notes=(),
    )


def closing_text(terminal: Terminal) -> str:
    """What the transcript keeps of a turn that did not end on a plain answer."""
    if isinstance(terminal.result, str) and terminal.result.strip():
        answer = terminal.result
    elif terminal.result is not None:
        answer = json.dumps(terminal.result, ensure_ascii=False)
    else:
        answer = "(no answer)"
    if terminal.status is TerminalStatus.COMPLETED:
        return answer
    return f"[this turn ended: {terminal.status.value}] {answer}"


def session_stop(
    used: RunUsage, limits: Limits, *, session_deadline: float, now: float
) -> TerminalStatus | None:
    """Before waiting for a delivery: is the session's own budget spent?"""
    if used.tokens >= limits.max_tokens:
        return TerminalStatus.EXHAUSTED_TOKENS
    if used.steps >= limits.max_steps:
        return TerminalStatus.EXHAUSTED_STEPS
    if now >= session_deadline:
        return TerminalStatus.DEADLINE
    return None


def spent_by_turn(status: TerminalStatus, bounds: TurnBounds) -> TerminalStatus | None:
    """A turn that ran out of a budget the session's remainder had set has spent the session."""
    if status is TerminalStatus.EXHAUSTED_TOKENS and bounds.session_tokens:
        return status
    if status is TerminalStatus.EXHAUSTED_STEPS and bounds.session_steps:
        return status
    return None
