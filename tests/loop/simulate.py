"""A pure driver for loop unit tests: feeds scripted replies and tool outcomes, no I/O, no clock."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from protocol.spawn import EndpointSpec, SpawnPayload
from subagent.loop.machine import (
    TurnView,
    initial_state,
    message_chars,
    next_action,
    on_model_reply,
    on_tool_results,
)
from subagent.loop.state import CallModel, CallTools, Finish, LoopState, Note, Terminal
from subagent.messages import (
    ModelReply,
    ModelRequest,
    TokenUsage,
    ToolCall,
    ToolOutcome,
    ToolResultMessage,
    ToolSpec,
)

ToolFn = Callable[[ToolCall], ToolOutcome]


def payload(tool_mode: str = "native", **overrides: Any) -> SpawnPayload:
    endpoint = EndpointSpec(
        kind="scripted",
        script_path="/dev/null",
        tool_mode=tool_mode,
        context_window=overrides.pop("context_window", 128_000),
    )
    base: dict[str, Any] = {
        "task_id": "t",
        "run_id": "r",
        "instruction": "do the thing",
        "intelligence": [endpoint],
    }
    base.update(overrides)
    return SpawnPayload.model_validate(base)


def spec(name: str) -> ToolSpec:
    return ToolSpec(name=name, description=f"the {name} tool", input_schema={"type": "object"})


def call(name: str, cid: str = "c1", **arguments: Any) -> ToolCall:
    return ToolCall(id=cid, name=name, arguments=dict(arguments), raw_arguments=str(arguments))


def reply(text: str = "", *calls: ToolCall, usage: tuple[int, int] = (10, 5), **kw: Any) -> ModelReply:
    return ModelReply(text=text, tool_calls=calls, usage=TokenUsage(*usage), **kw)


@dataclass
class Run:
    state: LoopState
    terminal: Terminal | None = None
    requests: list[ModelRequest] = field(default_factory=list)
    executed: list[ToolCall] = field(default_factory=list)
    # Every note the transitions left for the driver, in order (the driver emits and clears them).
    notes: list[Note] = field(default_factory=list)


def drive(
    state: LoopState,
    replies: Sequence[ModelReply] | Callable[[ModelRequest], ModelReply],
    tools: dict[str, ToolFn] | None = None,
    *,
    now: float = 0.0,
    cancel_after_calls: int | None = None,
    max_actions: int = 500,
    ungranted: frozenset[str] = frozenset(),
) -> Run:
    """Run the machine to a terminal status against scripted replies (a list is consumed in order);
    `ungranted` names tools a server lists outside the grant."""
    tools = tools or {}
    view = TurnView(tools=tuple(spec(n) for n in tools), ungranted=ungranted)
    run = Run(state)
    queue = list(replies) if not callable(replies) else []
    for _ in range(max_actions):
        cancelled = cancel_after_calls is not None and len(run.requests) >= cancel_after_calls
        action = next_action(run.state, view, now=now, cancelled=cancelled)
        if isinstance(action, Finish):
            run.terminal = action.terminal
            return run
        if isinstance(action, CallModel):
            run.requests.append(action.request)
            r = replies(action.request) if callable(replies) else (queue.pop(0) if queue else reply("done"))
            run.state = on_model_reply(run.state, action, r, now=now, cancelled=cancelled)
        elif isinstance(action, CallTools):
            outcomes = []
            for c in action.calls:
                run.executed.append(c)
                outcomes.append(tools[c.name](c))
            run.state = on_tool_results(run.state, outcomes, now=now, cancelled=cancelled)
        run.notes.extend(run.state.notes)
        run.state = replace(run.state, notes=())
        check_invariants(run.state)
    raise AssertionError("the loop did not terminate")


def check_invariants(state: LoopState) -> None:
    """The incrementally kept counters agree with a full recount."""
    assert state.chars == sum(message_chars(m) for m in (*state.head, *state.transcript))
    verbatim = [
        i for i, m in enumerate(state.transcript) if isinstance(m, ToolResultMessage) and not m.stubbed
    ]
    assert [i for i, _ in state.verbatim] == verbatim[len(verbatim) - len(state.verbatim) :]
    assert len(state.verbatim) <= state.config.keep_verbatim


def start(tool_mode: str = "native", **overrides: Any) -> LoopState:
    return initial_state(payload(tool_mode, **overrides), now=0.0)
