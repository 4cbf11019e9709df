"""How a run's ending is judged (pure): the VERIFY gate for a final answer (docs/loop.md, "VERIFY"), a
refusal, and an answer that only repeats agentd's own messages (loop/feedback.py).

A parroted answer or refusal reason is no result: it is re-asked once (an idle turn), and a
second one ends the run `stalled` with `error.kind` `parroted_feedback` — the loop spec's status
for a model that makes no progress — keeping the best partial seen before.
"""

from __future__ import annotations

from dataclasses import replace

from pydantic import JsonValue

from protocol.result import TerminalStatus
from subagent.loop import feedback, grounding, progress, verify
from subagent.loop.state import LoopState, Terminal
from subagent.loop.steps import end_idle_turn, finish, note_error, say, step_note

PARROT_REASKS = 1
PARROTED = "parroted_feedback"
PARROTED_MESSAGE = (
    "the model's answer repeated agentd's own message instead of giving a result, again after "
    "being asked for the result itself"
)
VACUOUS_REASK = "Your final answer was empty. Give the complete result of the task."


def on_final(
    state: LoopState,
    result: JsonValue,
    text: str,
    now: float,
    cancelled: bool,
    offered: frozenset[str] = frozenset(),
) -> LoopState:
    """A final answer: a parrot is re-asked, then ends the run; a vacuous one is re-asked; one
    about a named file no call opened is re-asked (`offered`: the turn's tools); the rest goes
    through VERIFY."""
    if isinstance(result, str) and feedback.parrots(result, state.feedback):
        return on_parrot(state, text, now, cancelled)
    cfg = state.config
    if (
        isinstance(result, str)
        and verify.is_vacuous(result)
        and state.vacuous_reasks_used < cfg.vacuous_reasks
    ):
        state, said = say(state, VACUOUS_REASK)
        state = replace(state, vacuous_reasks_used=state.vacuous_reasks_used + 1)
        state = note_error(state, "vacuous_final", "empty final answer re-asked")
        return end_idle_turn(state, "vacuous", progress.turn_signature(text, [said]), now, cancelled)
    unopened = _unopened(state, offered)
    if unopened:
        state, said = say(state, grounding.reask(unopened))
        state = replace(state, grounding_reasks_used=state.grounding_reasks_used + 1)
        state = note_error(state, "ungrounded_final", f"final answer before opening {', '.join(unopened)}")
        return end_idle_turn(state, "ungrounded", progress.turn_signature(text, [said]), now, cancelled)
    verdict = verify.verify_final(result, cfg.contract)
    if isinstance(verdict, verify.Verified):
        terminal = Terminal(TerminalStatus.COMPLETED, result=verdict.result, partial=False)
        return replace(state, terminal=terminal, notes=(*state.notes, step_note(state, "final")))
    if verdict.candidate is not None:
        state = replace(state, partial=verdict.candidate)
    state, said = say(state, verdict.observation)
    # Logged without the observation: schema messages quote the model's answer.
    state = note_error(state, "verify_failed", "the final answer does not satisfy the output contract")
    return end_idle_turn(state, "verify_failed", progress.turn_signature(text, [said]), now, cancelled)


def _unopened(state: LoopState, offered: frozenset[str]) -> tuple[str, ...]:
    """The named files the grounding re-ask asks about: none once it was used, after compaction
    (the calls before it are gone from the transcript) or without a server's tool to open them."""
    if state.grounding_reasks_used >= grounding.GROUNDING_REASKS or state.compactions:
        return ()
    if not grounding.offers_server_tools(offered):
        return ()
    asked = (*state.head, state.turn_message) if state.turn_message is not None else state.head
    return grounding.unopened(asked, state.transcript)


def on_refusal(state: LoopState, reason: str, text: str, now: float, cancelled: bool) -> LoopState:
    """The model declined the task: `refused` with its own reason; a reason that repeats
    agentd's message is a parrot, not a refusal."""
    if feedback.parrots(reason, state.feedback):
        return on_parrot(state, text, now, cancelled)
    return finish(state, TerminalStatus.REFUSED, reason or "the model declined the task", "refused")


def on_parrot(state: LoopState, text: str, now: float, cancelled: bool) -> LoopState:
    """An ending that only repeats agentd: one re-ask, then `stalled` (`parroted_feedback`)."""
    if state.parrot_reasks_used >= PARROT_REASKS:
        state = note_error(state, PARROTED, "the answer repeated agentd's message again; the run ends")
        terminal = Terminal(
            TerminalStatus.STALLED,
            result=state.partial,
            partial=state.partial is not None,
            reason=PARROTED_MESSAGE,
            error_kind=PARROTED,
        )
        return replace(state, terminal=terminal, notes=(*state.notes, step_note(state, "parrot")))
    state, said = say(state, feedback.REASK)
    state = replace(state, parrot_reasks_used=state.parrot_reasks_used + 1)
    state = note_error(state, PARROTED, "the answer repeated agentd's message; asked for the result")
    return end_idle_turn(state, "parrot", progress.turn_signature(text, [said]), now, cancelled)
