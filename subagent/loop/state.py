"""Loop state: the frozen data the machine transforms (docs/loop.md, "One turn", "Usage and the
token estimate").

Every field that changes during a run lives here; the machine returns a new `LoopState` for
every event (`dataclasses.replace`), so a state can be inspected, logged or replayed.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Literal

from pydantic import JsonValue

from protocol.result import RunUsage, TerminalStatus
from subagent.messages import Message, ModelRequest, ToolCall, ToolOutcome

ToolMode = Literal["native", "json"]


@dataclass(frozen=True, slots=True)
class Contract:
    """The machine-checkable part of the output contract (the VERIFY gate's input)."""

    format: Literal["text", "json"] = "text"
    schema: Mapping[str, JsonValue] | None = None
    objective: str | None = None
    success_criteria: tuple[str, ...] = ()


@dataclass(frozen=True, slots=True)
class LoopConfig:
    """The run's fixed parameters. `deadline` is an absolute monotonic instant."""

    max_steps: int
    max_tokens: int
    deadline: float
    repeat_cap: int = 3
    idle_limit: int = 3
    keep_verbatim: int = 5
    high_water: float = 0.75
    context_window: int = 128_000
    vacuous_reasks: int = 1
    # The run's current tool mode; with `auto_tool_mode` it starts native and may switch to
    # JSON actions once (never back: the transcript then holds JSON actions).
    tool_mode: ToolMode = "native"
    auto_tool_mode: bool = False
    contract: Contract = Contract()
    max_output_tokens: int | None = None
    # Ask for a last answer (tools off) when the budget is about to run out (loop/wrapup.py).
    wrap_up: bool = True


@dataclass(frozen=True, slots=True)
class Budgets:
    """Check-before / record-after counters (docs/loop.md, "Usage and the token estimate")."""

    used: RunUsage = field(default_factory=RunUsage)
    # The previous model call's usage: its prompt tokens are the ground truth for the next
    # estimate, and it is what the driver reports as that call's `ev/usage`.
    last_call: RunUsage | None = None


@dataclass(frozen=True, slots=True)
class RepeatEntry:
    """Per (tool, canonical arguments) key: calls so far and the digest of the last result."""

    count: int
    last_digest: str | None = None


@dataclass(frozen=True, slots=True)
class PlannedCall:
    """A tool call after the pre-execution checks: `refusal` set means it is not executed."""

    call: ToolCall
    key: str
    refusal: str | None = None


@dataclass(frozen=True, slots=True)
class Note:
    """Something the driver should report as an event (the machine itself does no I/O)."""

    event: Literal["loop.step", "loop.error", "loop.compact"]
    fields: Mapping[str, JsonValue]


@dataclass(frozen=True, slots=True)
class Terminal:
    status: TerminalStatus
    result: JsonValue = None
    partial: bool = False
    reason: str | None = None
    # Set when the status needs a word of its own (the run's `error.kind`; `reason` its message).
    error_kind: str | None = None


@dataclass(frozen=True, slots=True)
class LoopState:
    config: LoopConfig
    # Instruction and context seed: sent every turn, never compacted or stubbed.
    head: tuple[Message, ...]
    # The running transcript after the head: managed by levers 1 and 2.
    transcript: tuple[Message, ...] = ()
    # Invariant: the sum of `message_chars` over head + transcript, kept incrementally so a
    # turn's cost does not grow with the history.
    chars: int = 0
    # Invariant: (transcript index, stub text) of every tool result still verbatim, oldest first.
    verbatim: tuple[tuple[int, str], ...] = ()
    budgets: Budgets = Budgets()
    repeats: Mapping[str, RepeatEntry] = field(default_factory=dict)
    last_signature: str | None = None
    idle_turns: int = 0
    vacuous_reasks_used: int = 0
    # Answers that only repeated agentd's own messages, re-asked (loop/feedback.py).
    parrot_reasks_used: int = 0
    # Final answers about a file the instruction names and no call opened, re-asked
    # (loop/grounding.py).
    grounding_reasks_used: int = 0
    # The normalised sentences of agentd's own messages this run (loop/feedback.py).
    feedback: tuple[str, ...] = ()
    # The model has made a native tool call this run: its later prose is an answer, not a call.
    native_calls_seen: bool = False
    # Invariant: set between a CallTools action and its on_tool_results.
    pending: tuple[PlannedCall, ...] | None = None
    pending_text: str = ""
    # The best usable partial result so far (text, or a parsed JSON candidate).
    partial: JsonValue = None
    # A context overflow asks for compaction before the next call; a second overflow is fatal.
    force_compaction: bool = False
    overflow_retried: bool = False
    compactions: int = 0
    notes: tuple[Note, ...] = ()
    terminal: Terminal | None = None
    # A warm session's current delivery (loop/session.py): compaction keeps it verbatim after
    # the summary, so the turn never loses what it was asked.
    turn_message: Message | None = None


# ---- actions -------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class CallModel:
    request: ModelRequest
    # Tool wire names offered in this request: the scope the reply is checked against.
    offered: frozenset[str]
    # Set on a wrap-up call (loop/wrapup.py): the budget status its answer is labeled with.
    wrap_up: TerminalStatus | None = None
    # Tools a granted server lists outside this agent's grant (TurnView.ungranted).
    ungranted: frozenset[str] = frozenset()


@dataclass(frozen=True, slots=True)
class CallTools:
    calls: tuple[ToolCall, ...]


@dataclass(frozen=True, slots=True)
class Finish:
    terminal: Terminal


Action = CallModel | CallTools | Finish

__all__ = [
    "Action",
    "Budgets",
    "CallModel",
    "CallTools",
    "Contract",
    "Finish",
    "LoopConfig",
    "LoopState",
    "Note",
    "PlannedCall",
    "RepeatEntry",
    "Terminal",
    "ToolMode",
    "ToolOutcome",
]
