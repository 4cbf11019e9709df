"""What the daemon reports to its metrics: one small port, called where events already happen.

Every method is cheap and never raises; all but `journal_commit` are called on the event loop
(`journal_commit` on the journal's writer thread). Label values are passed raw: the implementation
bounds them (`agentd.metrics.labels`), so a caller never has to think about cardinality.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Protocol

from pydantic import JsonValue


class Metrics(Protocol):
    def task_submitted(self) -> None:
        """A submit created a task (an idempotent repeat is not counted)."""

    def task_finished(self, status: str, exit_code: int) -> None:
        """A task's one terminal status was recorded."""

    def tasks(self, *, running: int, queued: int) -> None:
        """The current number of running and queued tasks (sampled)."""

    def subagent_ready(self, seconds: float) -> None:
        """A subagent process sent `ev/ready` this long after it was spawned."""

    def child_event(self, event: str, fields: Mapping[str, JsonValue]) -> None:
        """An `ev/event` a subagent sent (model calls, tool calls and MCP reconnects count here)."""

    def rung(self, rung: str, cause: str) -> None:
        """The kill ladder reached `rung` (`cancel`, `sigterm`, `sigkill`) for `cause`."""

    def liveness(self, verdict: str) -> None:
        """A liveness detector fired with `verdict`."""

    def journal_commit(self, seconds: float) -> None:
        """One journal transaction committed in this long (called on the writer thread)."""

    def loop_lag(self, seconds: float) -> None:
        """The daemon's event loop woke this much later than it asked to."""

    # Money and provider limits (docs/budgets.md).
    def cost(self, endpoint: str, owner_uid: int, usd: float) -> None:
        """A model call of `owner_uid`'s task to `endpoint` cost `usd`."""

    def throttle_wait(self, endpoint: str, seconds: float) -> None:
        """A model request waited this long for a slot of `endpoint`'s provider limits."""

    # Extension point for schedules and triggers: the scheduler calls these once it
    # exists; `name` is a configured schedule's or trigger's name (bounded by the config).
    def fired(self, kind: str, name: str, outcome: str) -> None:
        """A schedule or trigger (`kind`) fired; `outcome` e.g. `started`, `skipped`, `refused`."""

    def armed(self, kind: str, states: Mapping[str, int]) -> None:
        """How many schedules or triggers (`kind`) are in each state (sampled)."""


class NullMetrics:
    """Metrics that go nowhere: the default when no `[metrics]` output is configured."""

    def task_submitted(self) -> None:
        pass

    def task_finished(self, status: str, exit_code: int) -> None:
        pass

    def tasks(self, *, running: int, queued: int) -> None:
        pass

    def subagent_ready(self, seconds: float) -> None:
        pass

    def child_event(self, event: str, fields: Mapping[str, JsonValue]) -> None:
        pass

    def rung(self, rung: str, cause: str) -> None:
        pass

    def liveness(self, verdict: str) -> None:
        pass

    def journal_commit(self, seconds: float) -> None:
        pass

    def loop_lag(self, seconds: float) -> None:
        pass

    def cost(self, endpoint: str, owner_uid: int, usd: float) -> None:
        pass

    def throttle_wait(self, endpoint: str, seconds: float) -> None:
        pass

    def fired(self, kind: str, name: str, outcome: str) -> None:
        pass

    def armed(self, kind: str, states: Mapping[str, int]) -> None:
        pass


NULL_METRICS: Metrics = NullMetrics()
