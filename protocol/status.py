"""Why a run ended: the closed set of terminal statuses (docs/design.md §12).

Standard library only, so a client that reads plain JSON (`agentd status`) can name a status
without the models; `protocol.result` re-exports it beside the run result that carries it.
"""

from __future__ import annotations

from enum import StrEnum


class TerminalStatus(StrEnum):
    """Why a run ended. Exactly one per run (docs/loop.md, "A run")."""

    COMPLETED = "completed"
    REFUSED = "refused"
    EXHAUSTED_STEPS = "exhausted_steps"
    EXHAUSTED_TOKENS = "exhausted_tokens"
    DEADLINE = "deadline"
    STALLED = "stalled"
    LOOP_DETECTED = "loop_detected"
    CANCELLED = "cancelled"
    CRASHED = "crashed"
