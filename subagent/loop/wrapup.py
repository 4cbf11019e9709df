"""The wrap-up turn (docs/loop.md, "Stop checks": at every soft budget the agent wraps up
gracefully and returns a labeled partial).

When the step or token budget is about to run out, the loop's last model call is a wrap-up
request with tools disabled; the model's answer to it is the run's partial result, labeled with
the budget that ran out (`exhausted_steps`/`exhausted_tokens`, exit 3). The tokens for that call
are reserved: an ordinary turn runs only while it and a wrap-up after it both fit the budget.
Pure: the machine supplies the estimates.
"""

from __future__ import annotations

import json
from dataclasses import dataclass

from pydantic import JsonValue

from protocol.contract import result_errors
from protocol.result import TerminalStatus
from subagent.loop import feedback, verify
from subagent.loop.action import FinalAction, RefuseAction, ToolAction, parse_action
from subagent.loop.state import LoopConfig, LoopState
from subagent.messages import ModelReply, UserMessage

# The answer the wrap-up call may write (its `max_output_tokens`), and the least worth asking for.
WRAP_UP_OUTPUT_TOKENS = 1024
MIN_WRAP_UP_OUTPUT_TOKENS = 64

_WHY = {
    TerminalStatus.EXHAUSTED_STEPS: "step",
    TerminalStatus.EXHAUSTED_TOKENS: "token",
}


@dataclass(frozen=True, slots=True)
class WrapUp:
    """Make the last call a wrap-up: `status` labels the partial, `max_output_tokens` caps the answer."""

    status: TerminalStatus
    max_output_tokens: int


def output_cap(config: LoopConfig) -> int:
    """The wrap-up answer's token cap: `WRAP_UP_OUTPUT_TOKENS`, at most an eighth of the token
    budget (a small budget is not spent on the reserve), and at most the endpoint's own limit."""
    cap = min(WRAP_UP_OUTPUT_TOKENS, max(MIN_WRAP_UP_OUTPUT_TOKENS, config.max_tokens // 8))
    if config.max_output_tokens is not None:
        cap = min(cap, config.max_output_tokens)
    return cap


def plan(state: LoopState, *, turn_estimate: int, wrap_estimate: int) -> WrapUp | None:
    """Whether the next model call must be the wrap-up, and why; None for an ordinary turn.

    `turn_estimate` is the ordinary request's forward estimate, `wrap_estimate` the wrap-up
    request's (no tool catalogue). A run allowed a single step gets no wrap-up: its one turn
    is an ordinary one. The caller has already stopped a run in which not even the smallest
    wrap-up fits (`MIN_WRAP_UP_OUTPUT_TOKENS`).
    """
    cfg = state.config
    used = state.budgets.used
    cap = output_cap(cfg)
    left = cfg.max_tokens - used.tokens - wrap_estimate
    if used.tokens + turn_estimate + wrap_estimate + cap >= cfg.max_tokens:
        return WrapUp(TerminalStatus.EXHAUSTED_TOKENS, max(MIN_WRAP_UP_OUTPUT_TOKENS, min(cap, left)))
    if cfg.max_steps >= 2 and used.steps + 1 >= cfg.max_steps:
        return WrapUp(TerminalStatus.EXHAUSTED_STEPS, cap)
    return None


def message(config: LoopConfig, status: TerminalStatus) -> UserMessage:
    """The wrap-up request's last message: the budget is spent, tools are gone, answer now."""
    lines = [
        f"Your {_WHY.get(status, 'step')} budget is used up: this is your last turn, and tools are no "
        "longer available. Reply now with your final answer: the best result you can give from the "
        "work so far. Say plainly what is incomplete or unverified."
    ]
    if config.contract.format == "json":
        lines.append("The answer must still be a single JSON value matching the output schema.")
    if config.tool_mode == "json":
        lines.append('Reply with exactly one JSON object: {"action": "final", "result": <your answer>}.')
    return UserMessage(feedback.mark(" ".join(lines)), kind="observation")


def answer(state: LoopState, reply: ModelReply, status: TerminalStatus) -> tuple[JsonValue, bool, bool]:
    """The wrap-up reply as the run's result: `(result, partial, refused)`.

    The model's answer wins when it is usable (a non-vacuous text, or a JSON reading under a JSON
    contract, preferring one that satisfies the schema); otherwise the best partial seen before.
    In JSON-action mode a `final` action's result is the answer and a tool action is ignored. An
    answer or refusal reason that only repeats agentd's messages is no answer (loop/feedback.py).
    """
    cfg = state.config
    sent = (*state.feedback, *feedback.sentences(message(cfg, status).text))
    result: JsonValue = reply.text
    if cfg.tool_mode == "json":
        parsed = parse_action(reply.text)
        if isinstance(parsed, RefuseAction) and not feedback.parrots(parsed.reason, sent):
            return parsed.reason or "the model declined the task", False, True
        if isinstance(parsed, FinalAction):
            result = parsed.result
        elif isinstance(parsed, ToolAction | RefuseAction):
            result = ""  # a tool call it can no longer make, a parroted refusal: nothing to report
    if isinstance(result, str) and feedback.parrots(result, sent):
        result = ""
    usable = _usable(result, cfg)
    if usable is not None:
        return usable, True, False
    return state.partial, state.partial is not None, False


def _usable(result: JsonValue, cfg: LoopConfig) -> JsonValue:
    if cfg.contract.format == "text":
        if isinstance(result, str):
            return None if verify.is_vacuous(result) else result
        return json.dumps(result, ensure_ascii=False)
    readings = verify.json_readings(result)
    if not readings:
        return None
    schema = cfg.contract.schema
    if schema is not None:
        for value in readings:
            if not result_errors(value, schema):
                return value
    return next((r for r in readings if not isinstance(r, str)), readings[0])
