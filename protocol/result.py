"""Terminal statuses, the run result a subagent reports, and the exit-code mapping.

`TerminalStatus` (defined in `protocol.status`, without pydantic) is the closed set of docs/design.md
§12; no other module may introduce a status.
`interrupted_status` is the one rule for a run stopped from outside (cancelled beats deadline),
shared by the loop, its driver and the supervisor's exit classifier. `exit_code` is docs/design.md §12
(docs/exit-codes.md): the single place a status becomes a process exit code.
"""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, JsonValue

from protocol.exit_codes import ExitCode
from protocol.status import TerminalStatus as TerminalStatus

AbortKind = Literal["intelligence", "mcp"]
"""The two fatal-infrastructure aborts (docs/loop.md, "Errors: observations, retries, aborts").
They ride on a `crashed` status."""


class _Wire(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class RunUsage(_Wire):
    """What a run consumed. Counters only grow."""

    tokens_in: int = Field(default=0, ge=0)
    tokens_out: int = Field(default=0, ge=0)
    steps: int = Field(default=0, ge=0)
    model_calls: int = Field(default=0, ge=0)
    tool_calls: int = Field(default=0, ge=0)
    # USD, as the supervisor priced each model call (`[intelligence.NAME] price`); 0 when unpriced.
    cost_usd: float = Field(default=0.0, ge=0)

    @property
    def tokens(self) -> int:
        return self.tokens_in + self.tokens_out

    def __add__(self, other: RunUsage) -> RunUsage:
        """Both consumptions together: every counter summed (`sum(usages, RunUsage())` works)."""
        counters = RunUsage.model_fields
        return RunUsage.model_validate(
            {name: getattr(self, name) + getattr(other, name) for name in counters}
        )


class RunError(_Wire):
    """A machine-readable reason next to the status: `kind` is a short snake_case word."""

    kind: str = Field(max_length=64)
    message: str = Field(max_length=4000)


class RunResult(_Wire):
    """The distillate of one run: the `ev/result` params and all a parent ever sees (docs/design.md §4)."""

    status: TerminalStatus
    result: JsonValue = None
    partial: bool = False
    usage: RunUsage = RunUsage()
    abort: AbortKind | None = None
    error: RunError | None = None
    # The model called `nothing_to_do`: the run found no work (a loop schedule backs off).
    idle: bool = False


def interrupted_status(*, cancelled: bool, past_deadline: bool) -> TerminalStatus | None:
    """The status of a run stopped from outside, or None if nothing stopped it.

    Cancelled beats deadline: when both hold, the explicit request to stop is the cause recorded.

    Args:
        cancelled: a stop was requested (`ctrl/cancel`, a task cancel, a daemon drain).
        past_deadline: the run's deadline has passed.
    """
    if cancelled:
        return TerminalStatus.CANCELLED
    if past_deadline:
        return TerminalStatus.DEADLINE
    return None


RESULT_TEXT_CAP = 8000
TRUNCATION_MARKER = "…[truncated by agentd]"


def cap_text(text: str, limit: int = RESULT_TEXT_CAP) -> str:
    """Cut `text` to at most `limit` characters, marking the cut."""
    if len(text) <= limit:
        return text
    if limit < len(TRUNCATION_MARKER):
        # No room for the marker: a plain cut still honours the limit.
        return text[:limit]
    return text[: limit - len(TRUNCATION_MARKER)] + TRUNCATION_MARKER


def distill(value: JsonValue) -> JsonValue:
    """Cap every string in a result at 8,000 characters, with a marker (docs/design.md §4)."""
    if isinstance(value, str):
        return cap_text(value)
    if isinstance(value, list):
        return [distill(v) for v in value]
    if isinstance(value, dict):
        return {k: distill(v) for k, v in value.items()}
    return value


def exit_code(result: RunResult, *, clean_drain: bool = False) -> ExitCode:
    """Map a run's outcome to the process exit code (docs/design.md §12).

    Args:
        result: the terminal result of the root run.
        clean_drain: the run was cancelled by an orderly daemon drain (exits 0, not 1).
    """
    if result.abort == "intelligence":
        return ExitCode.INTELLIGENCE
    if result.abort == "mcp":
        return ExitCode.MCP
    match result.status:
        case TerminalStatus.COMPLETED:
            return ExitCode.OK
        case TerminalStatus.REFUSED:
            return ExitCode.REFUSED
        case TerminalStatus.EXHAUSTED_STEPS | TerminalStatus.EXHAUSTED_TOKENS:
            return ExitCode.PARTIAL if result.partial else ExitCode.BUDGET
        case TerminalStatus.DEADLINE:
            return ExitCode.DEADLINE
        case TerminalStatus.STALLED | TerminalStatus.LOOP_DETECTED:
            return ExitCode.PARTIAL if result.partial else ExitCode.FAILURE
        case TerminalStatus.CANCELLED:
            return ExitCode.OK if clean_drain else ExitCode.FAILURE
        case TerminalStatus.CRASHED:
            return ExitCode.FAILURE
