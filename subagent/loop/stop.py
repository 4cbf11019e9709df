"""The stop-condition disjunction (docs/loop.md, "Stop checks") and the token forward estimate.

Cheapest first; each check names exactly one terminal status. Pre-call checks ask "would
another model call break a hard budget?"; post-call checks run after a turn's effect is
recorded.
"""

from __future__ import annotations

from protocol.result import TerminalStatus, interrupted_status
from subagent.loop.state import LoopState
from subagent.messages import estimate_tokens


def estimate_next(request_chars: int, last_prompt_tokens: int | None) -> int:
    """Tokens the next request will cost: chars/4 forward, plus a margin from the last ground truth."""
    return estimate_tokens(request_chars) + (last_prompt_tokens or 0) // 8


def pre_call_stop(state: LoopState, *, now: float, cancelled: bool, estimate: int) -> TerminalStatus | None:
    """Before a model call: cancelled, deadline, or a token budget the next call would exceed."""
    interrupted = interrupted_status(cancelled=cancelled, past_deadline=now >= state.config.deadline)
    if interrupted is not None:
        return interrupted
    if state.budgets.used.tokens + estimate >= state.config.max_tokens:
        return TerminalStatus.EXHAUSTED_TOKENS
    return None


def post_call_stop(state: LoopState, *, now: float, cancelled: bool) -> TerminalStatus | None:
    """After a turn: cancelled, steps, stalled, loop detected (the backstop past 2K repeats), deadline."""
    interrupted = interrupted_status(cancelled=cancelled, past_deadline=now >= state.config.deadline)
    if interrupted is TerminalStatus.CANCELLED:
        return interrupted
    if state.budgets.used.steps >= state.config.max_steps:
        return TerminalStatus.EXHAUSTED_STEPS
    if state.idle_turns >= state.config.idle_limit:
        return TerminalStatus.STALLED
    hard_cap = state.config.repeat_cap * 2
    if any(entry.count > hard_cap for entry in state.repeats.values()):
        return TerminalStatus.LOOP_DETECTED
    # After a turn only a cancel outranks the budget and progress stops; the deadline comes last.
    return interrupted


def needs_compaction(estimate: int, context_window: int, high_water: float) -> bool:
    """Lever 2 fires when the forward estimate crosses `high_water` of the window."""
    return estimate >= context_window * high_water
