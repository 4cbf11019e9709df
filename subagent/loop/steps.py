"""The small state steps every transition shares (pure): appending to the transcript, agentd's
own feedback, notes for the driver, and ending a turn or the run.
"""

from __future__ import annotations

from dataclasses import replace

from protocol.result import TerminalStatus
from subagent.loop import feedback, progress, stop, verify
from subagent.loop.state import LoopState, Note, Terminal
from subagent.messages import AssistantMessage, Message, ModelRequest, UserMessage


def message_chars(m: Message) -> int:
    if isinstance(m, AssistantMessage):
        return len(m.text) + sum(len(c.name) + len(c.raw_arguments or "") + 16 for c in m.tool_calls)
    return len(m.text)


def request_chars(request: ModelRequest) -> int:
    return len(request.system) + sum(message_chars(m) for m in request.messages)


def terminal_for(state: LoopState, status: TerminalStatus, reason: str | None = None) -> Terminal:
    """A terminal status carrying the best partial result so far."""
    return Terminal(status=status, result=state.partial, partial=state.partial is not None, reason=reason)


def append(state: LoopState, message: Message) -> LoopState:
    return replace(state, transcript=(*state.transcript, message), chars=state.chars + message_chars(message))


def heard(state: LoopState, text: str) -> LoopState:
    """Remember the sentences of a message agentd sent, to know an answer that repeats them."""
    return replace(state, feedback=feedback.remembered(state.feedback, text))


def say(state: LoopState, text: str) -> tuple[LoopState, str]:
    """Append agentd's own observation (marked as agentd's) and remember it; returns the text."""
    marked = feedback.mark(text)
    return heard(append(state, UserMessage(marked, kind="observation")), text), marked


def reset_transcript(state: LoopState, transcript: tuple[Message, ...]) -> LoopState:
    """Replace the whole transcript (compaction): recount, nothing left verbatim."""
    if state.turn_message is not None and state.turn_message not in transcript:
        transcript = (*transcript, state.turn_message)
    chars = sum(message_chars(m) for m in (*state.head, *transcript))
    return replace(state, transcript=transcript, chars=chars, verbatim=())


def remember_partial(state: LoopState, text: str) -> LoopState:
    if verify.is_vacuous(text) or feedback.parrots(text, state.feedback):
        return state
    if state.config.contract.format == "json":
        ok, value = verify.parse_json_result(text)
        return replace(state, partial=value) if ok else state
    return replace(state, partial=text)


def note_error(state: LoopState, kind: str, detail: str) -> LoopState:
    return replace(state, notes=(*state.notes, Note("loop.error", {"kind": kind, "detail": detail[:300]})))


def step_note(state: LoopState, kind: str, tool_calls: int = 0) -> Note:
    used = state.budgets.used
    return Note(
        "loop.step",
        {
            "step": used.steps,
            "kind": kind,
            "tool_calls": tool_calls,
            "tokens_in": used.tokens_in,
            "tokens_out": used.tokens_out,
            "idle_turns": state.idle_turns,
        },
    )


def end_turn(state: LoopState, kind: str, now: float, cancelled: bool, tool_calls: int = 0) -> LoopState:
    state = replace(state, notes=(*state.notes, step_note(state, kind, tool_calls)))
    halt = stop.post_call_stop(state, now=now, cancelled=cancelled)
    if halt is None:
        return state
    return replace(state, terminal=terminal_for(state, halt))


def end_idle_turn(
    state: LoopState, kind: str, signature: str | None, now: float, cancelled: bool
) -> LoopState:
    """End a turn whose output was an observation (`signature` None: unusable output)."""
    return end_turn(progress.record_signature(state, signature), kind, now, cancelled)


def finish(state: LoopState, status: TerminalStatus, result: str, kind: str) -> LoopState:
    terminal = Terminal(status=status, result=result, partial=False, reason=result[:300])
    return replace(state, terminal=terminal, notes=(*state.notes, step_note(state, kind)))
