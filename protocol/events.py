"""The closed event vocabulary of docs/design.md §13.

Every log line's `event` and every `ev/event` frame names one of these. Extend deliberately:
add the name here, document it in docs/events.md, and the vocabulary test keeps both in step.
"""

from __future__ import annotations

from typing import Literal, get_args

EventName = Literal[
    "proc.start",
    "proc.ready",
    "proc.drain",
    "proc.exit",
    "config.loaded",
    "config.invalid",
    "task.submitted",
    "task.started",
    "task.terminal",
    "subagent.spawn",
    "subagent.ready",
    "subagent.exit",
    "subagent.stuck",
    "subagent.starved",
    "subagent.signal",
    "subagent.restart",
    "limit.exceeded",
    "trigger.armed",
    "trigger.fired",
    "resource.updated",
    "loop.start",
    "loop.step",
    "loop.final",
    "loop.error",
    "intel.call",
    "intel.result",
    "tool.call",
    "tool.result",
    # Extensions beyond docs/design.md §13, each documented in docs/events.md.
    "mcp.connect",
    "mcp.disconnect",
    "mcp.log",
    "mcp.progress",
    "loop.compact",
    "log.stderr",
    "api.accept",
    "api.reject",
    "api.connect",
    "api.disconnect",
    "api.error",
    # systemd integration (docs/operations.md): a notify-socket problem, reported once; the
    # fault-injection wedge of the event loop (only with AGENTD_TEST_WEDGE_ON_SIGUSR2 set).
    "proc.notify",
    "proc.wedge",
    # Schedules (docs/design.md §11; docs/schedules.md): created, each fire or skipped occurrence, paused
    # (by a client or a spent token budget), resumed, ended (max_runs, failures, a cancel), deleted.
    "schedule.created",
    "schedule.fired",
    "schedule.skipped",
    "schedule.paused",
    "schedule.resumed",
    "schedule.ended",
    "schedule.deleted",
    # Reactive triggers (docs/triggers.md): the restart governor waits before restarting a dead
    # watcher, or gives up on it; a server that cannot notify; an operator's pause and resume; a
    # delivery dropped by the overflow policy (or refused by the owner's cap).
    "trigger.backoff",
    "trigger.failed",
    "trigger.unsupported",
    "trigger.paused",
    "trigger.resumed",
    "trigger.dropped",
    "trigger.catalogue",
    # Metrics outputs (docs/metrics.md): where the listener bound, or a failed textfile write.
    "proc.metrics",
    # The approval gate (docs/security.md "Approval of tool calls"): a gated call waits for a
    # person; the decision (approved, denied, timeout) with the decider's uid and the wait.
    "approval.requested",
    "approval.decided",
    # Warm sessions (docs/warm-sessions.md): one delivery's turn ended (its status and usage).
    "session.turn",
    # Remote executors (docs/temporal.md): an attempt of a task started on a worker; heartbeat
    # tails that overflowed between two polls; a Temporal call that failed (retried).
    "task.attempt",
    "task.events_lost",
    "executor.error",
    # Resume (docs/durability.md): a run goes on from its journaled transcript (the supervisor's
    # `task.resumed`, with the step it starts from), a stop parks a running task, a crashed one is
    # queued for its next attempt, and the subagent's replay of the journal ended (how many
    # steps, and why it diverged, if it did).
    "task.resumed",
    "task.parked",
    "task.requeued",
    "task.paused",
    "task.extended",
    # Daily caps (docs/budgets.md): a task a spent daily cap holds back until the cap's next day.
    "task.deferred",
    "loop.resumed",
    # Retention (docs/durability.md): ended tasks and transcripts past their retention deleted.
    "journal.pruned",
    # Provider limits (docs/budgets.md): a model request waited for a slot of a limited endpoint;
    # a provider's 429 (or 503 with Retry-After) holds every task's requests to it back.
    "intel.throttled",
    "intel.backoff",
    # Money (docs/budgets.md): a reply reported no usage, so its cost was counted at its maximum.
    "intel.unmetered",
]

EVENT_NAMES: frozenset[str] = frozenset(get_args(EventName))

Component = Literal["supervisor", "agent", "mcp", "intel"]
