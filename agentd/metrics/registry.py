"""The daemon's metrics in a `prometheus_client` registry of their own (docs/metrics.md).

Imported only when a `[metrics]` output is configured (the `metrics` extra). A private
`CollectorRegistry`, not the library's global one, so nothing else that happens to be loaded
adds series to the daemon's page and tests can build as many as they like. Every label value goes
through `agentd.metrics.labels` first.
"""

from __future__ import annotations

from collections.abc import Mapping

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, disable_created_metrics
from pydantic import JsonValue

from agentd.metrics import labels
from agentd.metrics.labels import KnownNames, ModelCall, NamesSource, ServerRestart, ToolCall

# Seconds. Spawns are tens of milliseconds (zygote) to a second (exec under load); model calls
# and tool calls from milliseconds to minutes; journal commits and loop lag are sub-millisecond
# when healthy, and anything past a second is an incident.
SPAWN_BUCKETS = (0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0)
CALL_BUCKETS = (0.005, 0.025, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 120.0, 300.0)
FAST_BUCKETS = (0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 5.0)


class PrometheusMetrics:
    """`agentd.metrics.port.Metrics` kept in a `prometheus_client` registry."""

    def __init__(self, names: NamesSource = KnownNames) -> None:
        self.names = names
        # No `*_created` series: a scrape of the daemon's page is half their size without them,
        # and the process start time says when every counter began. (Process-wide; the daemon
        # holds one registry.)
        disable_created_metrics()  # type: ignore[no-untyped-call]
        self.registry = CollectorRegistry(auto_describe=True)
        r = self.registry
        self._submitted = Counter("agentd_tasks_submitted", "Tasks created by task.submit.", registry=r)
        self._finished = Counter(
            "agentd_tasks_finished",
            "Tasks that reached their terminal status, by status and exit code.",
            ["status", "exit_code"],
            registry=r,
        )
        self._running = Gauge("agentd_tasks_running", "Root tasks running now.", registry=r)
        self._queued = Gauge("agentd_tasks_queued", "Tasks waiting in the queue now.", registry=r)
        self._spawn = Histogram(
            "agentd_subagent_spawn_seconds",
            "Time from spawning a subagent process to its ev/ready.",
            buckets=SPAWN_BUCKETS,
            registry=r,
        )
        self._model_calls = Counter(
            "agentd_model_calls",
            "Model call attempts, by endpoint and outcome.",
            ["endpoint", "outcome"],
            registry=r,
        )
        self._model_tokens = Counter(
            "agentd_model_tokens",
            "Tokens the models reported, by endpoint and direction (in: prompt, out: completion).",
            ["endpoint", "direction"],
            registry=r,
        )
        self._model_seconds = Histogram(
            "agentd_model_call_seconds",
            "Duration of one model call attempt, by endpoint.",
            ["endpoint"],
            buckets=CALL_BUCKETS,
            registry=r,
        )
        self._tool_calls = Counter(
            "agentd_tool_calls",
            "Tool calls, by MCP server (self: the subagent's own tools) and outcome.",
            ["server", "outcome"],
            registry=r,
        )
        self._tool_seconds = Histogram(
            "agentd_tool_call_seconds",
            "Duration of one tool call, by MCP server.",
            ["server"],
            buckets=CALL_BUCKETS,
            registry=r,
        )
        self._restarts = Counter(
            "agentd_mcp_server_restarts",
            "MCP server connections re-established after a failure, by server.",
            ["server"],
            registry=r,
        )
        self._rungs = Counter(
            "agentd_kill_ladder_rungs",
            "Kill-ladder rungs reached, by rung and cause.",
            ["rung", "cause"],
            registry=r,
        )
        self._liveness = Counter(
            "agentd_liveness_firings",
            "Liveness detector firings, by verdict.",
            ["verdict"],
            registry=r,
        )
        self._commit = Histogram(
            "agentd_journal_commit_seconds",
            "Duration of one journal transaction (a group commit).",
            buckets=FAST_BUCKETS,
            registry=r,
        )
        self._lag = Histogram(
            "agentd_event_loop_lag_seconds",
            "How late the daemon's event loop woke from a timed sleep.",
            buckets=FAST_BUCKETS,
            registry=r,
        )
        self._cost = Counter(
            "agentd_cost_usd",
            "USD the model calls cost, as priced by `[intelligence.NAME] price`, by endpoint and owner uid.",
            ["endpoint", "owner"],
            registry=r,
        )
        self._throttle = Histogram(
            "agentd_throttle_wait_seconds",
            "How long a throttled model request waited for a slot of its endpoint's provider limits.",
            ["endpoint"],
            buckets=CALL_BUCKETS,
            registry=r,
        )
        self._fires = Counter(
            "agentd_fires",
            "Schedule and trigger fires, by kind, configured name and outcome.",
            ["kind", "name", "outcome"],
            registry=r,
        )
        self._armed = Gauge(
            "agentd_armed",
            "Schedules and triggers, by kind and state.",
            ["kind", "state"],
            registry=r,
        )

    # ---- tasks ---------------------------------------------------------------------------------

    def task_submitted(self) -> None:
        self._submitted.inc()

    def task_finished(self, status: str, exit_code: int) -> None:
        self._finished.labels(
            labels.bounded(status, labels.STATUSES), labels.bounded(exit_code, labels.EXIT_CODES)
        ).inc()

    def tasks(self, *, running: int, queued: int) -> None:
        self._running.set(running)
        self._queued.set(queued)

    # ---- subagents -----------------------------------------------------------------------------

    def subagent_ready(self, seconds: float) -> None:
        self._spawn.observe(max(0.0, seconds))

    def child_event(self, event: str, fields: Mapping[str, JsonValue]) -> None:
        seen = labels.observe(event, fields, self.names())
        if isinstance(seen, ModelCall):
            self._model_calls.labels(seen.endpoint, seen.outcome).inc()
            if seen.tokens_in:
                self._model_tokens.labels(seen.endpoint, "in").inc(seen.tokens_in)
            if seen.tokens_out:
                self._model_tokens.labels(seen.endpoint, "out").inc(seen.tokens_out)
            if seen.seconds is not None:
                self._model_seconds.labels(seen.endpoint).observe(seen.seconds)
        elif isinstance(seen, ToolCall):
            self._tool_calls.labels(seen.server, seen.outcome).inc()
            if seen.seconds is not None:
                self._tool_seconds.labels(seen.server).observe(seen.seconds)
        elif isinstance(seen, ServerRestart):
            self._restarts.labels(seen.server).inc()

    def rung(self, rung: str, cause: str) -> None:
        rung_label = labels.bounded(rung, labels.RUNGS)
        self._rungs.labels(rung_label, labels.bounded(cause, labels.KILL_CAUSES)).inc()

    def liveness(self, verdict: str) -> None:
        self._liveness.labels(labels.bounded(verdict, labels.VERDICTS)).inc()

    # ---- the daemon ----------------------------------------------------------------------------

    def journal_commit(self, seconds: float) -> None:
        self._commit.observe(max(0.0, seconds))

    def loop_lag(self, seconds: float) -> None:
        self._lag.observe(max(0.0, seconds))

    # ---- money and provider limits -------------------------------------------------------------

    def cost(self, endpoint: str, owner_uid: int, usd: float) -> None:
        # Owners are the host's uids: as bounded as the users who may connect.
        self._cost.labels(labels.bounded(endpoint, self.names().endpoints), str(owner_uid)).inc(max(usd, 0.0))

    def throttle_wait(self, endpoint: str, seconds: float) -> None:
        self._throttle.labels(labels.bounded(endpoint, self.names().endpoints)).observe(max(seconds, 0.0))

    # ---- schedules and triggers (the scheduler's and trigger manager's extension point) --------------

    def fired(self, kind: str, name: str, outcome: str) -> None:
        kind_label = labels.bounded(kind, labels.FIRE_KINDS)
        outcome_label = labels.bounded(outcome, labels.FIRE_OUTCOMES)
        self._fires.labels(kind_label, labels.fire_name(kind, name, self.names()), outcome_label).inc()

    def armed(self, kind: str, states: Mapping[str, int]) -> None:
        kind_label = labels.bounded(kind, labels.FIRE_KINDS)
        for state, count in states.items():
            self._armed.labels(kind_label, labels.bounded(state, labels.ARM_STATES)).set(count)
