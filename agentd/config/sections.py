"""The daemon-wide sections of `agentd.toml`: `[daemon]`, `[defaults]`, `[limits]`,
`[supervision]`, `[loop]`, `[security]`, `[metrics]`, `[executor]`, `[[trigger]]` and `[[schedule]]`.

These models check shape and single-value ranges; rules that span keys or sections live in
`agentd.config.check`, which names the exact key of each problem. Every field's `description`
is the reference text (it feeds `agentd config schema` and docs/configuration.md).
"""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator

from agentd.config.types import (
    ConfigPath,
    CountOrInfinity,
    Duration,
    Name,
    Seconds,
    SizeOrInfinity,
    WholeSecondsOrInfinity,
)
from agentd.metrics.address import parse_listen
from processes.ladder import LadderPolicy
from protocol.spawn import Limits, LoopKnobs

# The protocol's own defaults are the single source of truth for the task and loop numbers.
_LIMITS = Limits()
_KNOBS = LoopKnobs()
_LADDER = LadderPolicy()


class Section(BaseModel):
    """Base of every config table: unknown keys are errors, values are immutable once loaded."""

    # Strict: TOML has real booleans and numbers, so "yes" for a boolean is a mistake, not a spelling.
    model_config = ConfigDict(
        extra="forbid", frozen=True, strict=True, populate_by_name=True, serialize_by_alias=True
    )


class DaemonSection(Section):
    socket: ConfigPath | None = Field(
        default=None,
        description="Unix socket the daemon listens on. Default: $RUNTIME_DIRECTORY/agentd.sock under "
        "systemd, else $XDG_RUNTIME_DIR/agentd/agentd.sock, else /run/agentd/agentd.sock (root) or "
        "/tmp/agentd-<uid>/agentd.sock. $AGENTD_SOCKET and --socket override it.",
    )
    state_dir: ConfigPath | None = Field(
        default=None,
        description="Directory of the journal (agentd.db) and task notes. Default: $STATE_DIRECTORY under "
        "systemd, else $XDG_STATE_HOME/agentd (~/.local/state/agentd). $AGENTD_STATE_DIR and "
        "--state-dir override it.",
    )
    max_concurrent_tasks: int = Field(
        default=8, ge=1, le=10_000, description="Root tasks running at once; further submits queue."
    )
    max_running_per_uid: CountOrInfinity = Field(
        default=None,
        description="Root tasks one user may have running at once (a task waiting for an approval "
        "counts until it is parked); that user's further tasks wait, others' start. `infinity` for none.",
    )
    max_connections_per_uid: int = Field(
        default=32, ge=1, le=10_000, description="Open API connections one client uid may hold."
    )
    max_connections: int = Field(
        default=1024,
        ge=1,
        le=100_000,
        description="Open API connections in total, every uid together; one past it is refused and closed.",
    )
    idle_timeout_s: Seconds = Field(
        default=60.0,
        gt=0,
        description="An API connection that has sent nothing (no partial frame, no request in flight) for "
        "this long is closed; a first frame must start within it too.",
    )
    admin_group: str | None = Field(
        default=None,
        pattern=r"^([a-z_][a-z0-9_-]*\$?|[0-9]+)$",
        description="Group (name or gid) whose members may see and cancel every user's tasks, like the "
        "daemon's own uid and root. Unset: nobody else.",
    )
    socket_group: str | None = Field(
        default=None,
        pattern=r"^([a-z_][a-z0-9_-]*\$?|[0-9]+)$",
        description="Group (name or gid) that owns the socket and its directory, so its members may connect "
        "and submit (they still see only their own tasks). Unset: admin_group, else the daemon's group.",
    )
    drain_timeout_s: Seconds = Field(
        default=25.0,
        gt=0,
        description="On SIGTERM, how long running tasks get to finish before the kill ladder. Must stay "
        "below systemd's TimeoutStopSec (default 90 s) and leave room for the ladder.",
    )
    on_stop: Literal["park", "cancel"] = Field(
        default="park",
        description="What a stop (SIGTERM) does to running tasks: `park` stops their subagents and "
        "queues them again with their transcripts, to resume from their last step at the next start; "
        "`cancel` ends them `cancelled` (docs/durability.md).",
    )
    park_approval_after: Duration = Field(
        default=60.0,
        ge=0,
        description="A task whose tool call has waited this long for a person's approval is parked: its "
        "subagents stop and its run slot frees, and it resumes from its last step once the call is "
        "decided (or its request expires). 0: never park; the task holds its slot while it waits.",
    )
    log_level: Literal["debug", "info", "warning", "error"] = Field(
        default="info", description="Daemon log level; also passed to subagents."
    )
    log_content: bool = Field(
        default=False,
        description="Log prompts, replies and tool payloads. Off: hashes and lengths only (--log-content).",
    )
    frame_deadline_s: Seconds = Field(
        default=10.0, gt=0, description="Time a client has to finish sending one API frame (slowloris)."
    )
    max_events_per_task: int = Field(
        default=5000, ge=100, le=1_000_000, description="Journaled events kept per task; the oldest go first."
    )
    gc_freeze: bool = Field(
        default=True,
        description="Freeze the live tasks' long-lived objects out of the garbage collector's full "
        "collections; collect everything once no task has been live for 5 s (or the frozen heap doubled).",
    )
    max_queued_per_uid: CountOrInfinity = Field(
        default=100,
        description="Queued tasks one user may have; a submit past it is refused (retryable). "
        "`infinity` for none.",
    )
    max_pending_bytes_per_uid: SizeOrInfinity = Field(
        default=64 << 20,
        description="Bytes of specs one user's queued and running tasks and schedules may hold in the "
        "journal; a submit or schedule past it is refused (retryable). `infinity` for none.",
    )
    max_schedules_per_uid: CountOrInfinity = Field(
        default=100,
        description="Schedules one user may hold (in any state, until deleted); a schedule past it is "
        "refused (retryable). `infinity` for none.",
    )
    max_fires_per_minute_per_uid: CountOrInfinity = Field(
        default=60,
        description="Fires one user's schedules may make in a minute; a fire past it is skipped, naming "
        "the cap. `infinity` for none.",
    )


class DefaultsSection(Section):
    model: Name | None = Field(
        default=None,
        description="Intelligence endpoint for tasks that name none. Default: the first "
        "[intelligence.*] table in the file.",
    )
    mcp: list[Name] = Field(
        default_factory=list,
        max_length=64,
        description="MCP servers granted to tasks that name none.",
    )
    max_steps: int = Field(default=_LIMITS.max_steps, ge=1, le=100_000, description="Default step budget.")
    on_budget: Literal["end", "pause"] = Field(
        default="end",
        description="When a task's step or token budget runs out: `end` it `exhausted_*`, or `pause` it "
        "(`awaiting_budget`) until `agentd extend` raises the budget (docs/durability.md).",
    )
    budget_wait_timeout: Duration = Field(
        default=86400.0,
        gt=0,
        description="How long a paused task waits for `agentd extend`; then it ends `exhausted_*`.",
    )
    max_tokens: int = Field(default=_LIMITS.max_tokens, ge=1, description="Default token budget.")
    max_cost: float | None = Field(
        default=None,
        gt=0,
        le=1_000_000,
        description="Default cost budget in USD for a whole task tree (docs/budgets.md); needs a price "
        "on every endpoint of the task's chain. Unset: no cost budget.",
    )
    deadline_s: Duration = Field(
        default=_LIMITS.deadline_s, gt=0, alias="deadline", description="Default wall-clock deadline."
    )
    max_depth: int = Field(
        default=_LIMITS.remaining_depth,
        ge=0,
        le=4,
        description="How deep a task's subagent tree may go (≤ 4).",
    )
    child_max_steps: int = Field(
        default=20,
        ge=1,
        le=100_000,
        description="A nested subagent's step grant when its parent asks for none.",
    )
    child_max_tokens: int = Field(
        default=50_000, ge=1000, description="A nested subagent's token grant when its parent asks for none."
    )
    max_steps_ceiling: int = Field(
        default=400, ge=1, le=100_000, description="Largest step budget a task may ask for (larger is cut)."
    )
    max_tokens_ceiling: int = Field(
        default=2_000_000, ge=1, description="Largest token budget a task may ask for (larger is cut)."
    )
    deadline_ceiling_s: Duration = Field(
        default=2 * 3600.0,
        gt=0,
        le=7 * 86400,
        alias="deadline_ceiling",
        description="Longest deadline a task may ask for (longer is cut).",
    )


class LimitsSection(Section):
    """Containment of each subagent process (docs/design.md §6)."""

    memory_max_bytes: SizeOrInfinity = Field(
        default=2 << 30,
        alias="memory_max",
        description="cgroup memory.max of a task's leaf (the subagent and its stdio MCP servers), where "
        "agentd can create cgroups; `infinity` for none.",
    )
    pids_max: CountOrInfinity = Field(
        default=512,
        ge=8,
        description="cgroup pids.max of a task's leaf (processes and threads); stops fork bombs.",
    )
    cpu_seconds: WholeSecondsOrInfinity = Field(
        default=3600, description="RLIMIT_CPU of a subagent (CPU time, not wall time); `infinity` for none."
    )
    nofile: int = Field(default=1024, ge=64, le=1 << 20, description="RLIMIT_NOFILE of a subagent.")
    address_space_bytes: SizeOrInfinity = Field(
        default=8 << 30,
        alias="address_space",
        description="RLIMIT_AS of a subagent. Keep it generous (threads reserve address space they never "
        "touch); bound real memory with memory_max.",
    )


class BudgetsSection(Section):
    """Daily caps on what each user spends (docs/budgets.md, "Daily caps"): a user's new tasks
    past one wait for the next UTC day; nothing already running is stopped."""

    per_uid_daily_cost: float | None = Field(
        default=None,
        ge=0,
        description="USD one user's tasks may spend a UTC day (priced endpoints only). Unset: no cap.",
    )
    per_uid_daily_tokens: int | None = Field(
        default=None, ge=1, description="Tokens one user's tasks may spend a UTC day. Unset: no cap."
    )


class SupervisionSection(Section):
    """Liveness detectors, the kill ladder and the restart governor (docs/design.md §6)."""

    ping_interval_s: Seconds = Field(default=5.0, gt=0, description="How often each child is pinged.")
    missed_pongs: int = Field(default=3, ge=1, description="Unanswered pings before a child is stuck.")
    starved_grace_s: Seconds = Field(
        default=60.0,
        ge=0,
        description="Past a missed timeout (ready, pongs, loop age), how long a child starved of CPU is "
        "given; 0: none.",
    )
    loop_stall_s: Seconds = Field(
        default=30.0, gt=0, description="A pong reporting an event-loop age above this means a wedged loop."
    )
    deadline_backstop_s: Seconds = Field(
        default=5.0, ge=0, description="Grace past a child's deadline before the supervisor stops it."
    )
    ready_timeout_s: Seconds = Field(
        default=60.0,
        gt=0,
        description="Spawn to `ev/ready`, at most (unless starved of CPU: starved_grace_s).",
    )
    eof_grace_s: Seconds = Field(
        default=2.0, gt=0, description="After the control channel closes, time for the process to exit."
    )
    max_protocol_faults: int = Field(
        default=3, ge=1, description="Malformed frames a child may send before it is killed."
    )
    cancel_grace_s: Seconds = Field(
        default=_LADDER.cancel_grace_s, gt=0, description="Kill ladder: `ctrl/cancel` → SIGTERM."
    )
    term_grace_s: Seconds = Field(
        default=_LADDER.term_grace_s, gt=0, description="Kill ladder: SIGTERM → SIGKILL."
    )
    kill_reap_s: Seconds = Field(
        default=_LADDER.kill_reap_s, gt=0, description="Kill ladder: SIGKILL → reaped, at most."
    )
    orphan_sweep_interval_s: Seconds = Field(
        default=10.0, gt=0, description="How often reparented orphans (leaked tool servers) are killed."
    )
    stderr_line_cap: int = Field(
        default=8192, ge=256, le=1 << 20, description="Bytes of one child stderr line re-emitted to the log."
    )
    spawner: Literal["exec", "zygote"] = Field(
        default="zygote",
        description="How subagents start: `exec` runs a fresh interpreter each time (pays the imports, "
        "~1 s of CPU); `zygote` forks them from a pre-imported helper process (milliseconds; the daemon "
        "waits for it while it warms up, and falls back to exec if it is not warm in time or fails).",
    )
    zygote_wait_s: Seconds = Field(
        default=30.0,
        ge=0,
        le=60,
        description="How long a spawn waits for a zygote that is still starting before it execs instead; "
        "0 never waits. Read at daemon start.",
    )
    spawn_window: int = Field(
        default=16,
        ge=0,
        le=10_000,
        description="Subagents booting at once (from their spawn to their first model call, at most 2 s "
        "after `ev/ready`); further spawns wait their turn in order. 0: no bound. Read at daemon start.",
    )
    batch_scheduling: bool = Field(
        default=True,
        description="Run subagents under SCHED_BATCH: the same CPU share, but a child woken by the daemon "
        "(a ping, its spawn frame) does not preempt it, so the daemon keeps answering while hundreds boot. "
        "Read at daemon start.",
    )
    subagent_nice: int = Field(
        default=19,
        ge=0,
        le=19,
        description="How many nice levels below the daemon its subagents run (and so the MCP servers they "
        "start), capped at nice 19. They share the daemon's session, so the kernel weighs them against the "
        "daemon rather than against everyone else's processes: however many boot or journal steps at once, "
        "the daemon still gets the CPU to answer clients. 0: the daemon's own priority. "
        "Read at daemon start.",
    )
    child_command: list[str] | None = Field(
        default=None,
        min_length=1,
        description=(
            "The program run as each subagent, for debugging and fault-injection tests only; the default "
            "is this interpreter running `python -I -m subagent`. It speaks the control protocol."
        ),
    )
    restart_backoff_initial_s: Seconds = Field(
        default=1.0,
        gt=0,
        le=3600,
        description="Restart governor: the first delay before a dead resource watcher is restarted; "
        "each further restart within restart_window_s doubles it (less up to 20% jitter).",
    )
    restart_backoff_max_s: Seconds = Field(
        default=60.0, gt=0, le=86400, description="Restart governor: the longest delay between restarts."
    )
    restart_max: int = Field(
        default=5,
        ge=0,
        le=1000,
        description="Restart governor: restarts allowed within restart_window_s; one more death and the "
        "watcher's triggers are `failed` until a reload or `agentd triggers restart NAME`.",
    )
    restart_window_s: Seconds = Field(
        default=300.0, gt=0, le=86400, description="Restart governor: the window restart_max counts in."
    )
    watch_command: list[str] | None = Field(
        default=None,
        min_length=1,
        description=(
            "The program run as each resource watcher, for debugging and tests only; the default is this "
            "interpreter running `python -I -m subagent.watch`. It speaks the watch protocol. Read at "
            "daemon start."
        ),
    )


class LoopSection(Section):
    """Overrides of the loop knobs (`protocol.spawn.LoopKnobs`) for every task."""

    repeat_cap: int = Field(
        default=_KNOBS.repeat_cap, ge=1, description="Identical tool calls allowed before refusal (K)."
    )
    idle_limit: int = Field(default=_KNOBS.idle_limit, ge=1, description="Turns without progress → stalled.")
    keep_verbatim: int = Field(
        default=_KNOBS.keep_verbatim, ge=0, description="Latest tool results kept verbatim on compaction (M)."
    )
    compaction_high_water: float = Field(
        default=_KNOBS.compaction_high_water,
        gt=0,
        le=1,
        description="Fraction of the context window that triggers compaction.",
    )
    transport_retries: int = Field(
        default=_KNOBS.transport_retries, ge=0, le=10, description="Retries of a failed model request."
    )
    backoff_initial_s: float = Field(
        default=_KNOBS.backoff_initial_s, gt=0, description="First retry delay (doubles each retry)."
    )
    backoff_max_s: float = Field(default=_KNOBS.backoff_max_s, gt=0, description="Retry delay cap.")
    vacuous_reasks: int = Field(
        default=_KNOBS.vacuous_reasks, ge=0, description="Times an empty final answer is asked again."
    )
    catalogue_bytes: int = Field(
        default=_KNOBS.catalogue_bytes,
        ge=0,
        description="Bytes of the resource catalogue in the system prompt.",
    )


TrustTag = Literal["untrusted_input", "sensitive", "egress"]


class SecuritySection(Section):
    allow_rule_of_two_violation: bool = Field(
        default=False,
        description="Allow every grant that combines untrusted_input, sensitive and egress tools "
        "(docs/design.md §14). Prefer the per-server key of the same name.",
    )


class JournalSection(Section):
    """What the journal keeps of ended tasks (docs/durability.md, "Retention")."""

    task_retention: Duration = Field(
        default=30 * 86400.0,
        gt=0,
        description="How long an ended task (its row, events, nodes, approvals, transcript) is kept "
        "after it ended; then it is deleted and its pages given back to the file system.",
    )
    transcript_retention: Duration = Field(
        default=30 * 86400.0,
        gt=0,
        description="How long an ended task's transcript (`agentd transcript`) is kept after it ended.",
    )
    max_transcript_bytes: int = Field(
        default=16 * 1024 * 1024,
        ge=4096,
        description="A task's transcript past this many bytes keeps a digest of each of its oldest tool "
        "results instead of the result's body (a resumed run then sees the digests, as after a "
        "compaction).",
    )


class MetricsSection(Section):
    """Prometheus metrics (docs/metrics.md); both outputs are off unless set."""

    listen: str | None = Field(
        default=None,
        description="Where Prometheus scrapes /metrics: HOST:PORT (e.g. 127.0.0.1:9464) or an absolute "
        "unix socket path (never the API socket). Unset: no listener. Fixed for the daemon's life.",
    )
    textfile: ConfigPath | None = Field(
        default=None,
        description="A node-exporter textfile (a .prom file in its --collector.textfile.directory), "
        "replaced atomically every textfile_interval_s and at exit. Unset: none.",
    )
    textfile_interval_s: Seconds = Field(
        default=15.0, gt=0, le=3600, description="How often the textfile is rewritten."
    )

    @field_validator("listen")
    @classmethod
    def _listen_form(cls, value: str | None) -> str | None:
        if value is not None:
            parse_listen(value)  # raises ValueError with the reason
        return value

    @field_validator("textfile")
    @classmethod
    def _prom_suffix(cls, value: str | None) -> str | None:
        if value is not None and not value.endswith(".prom"):
            raise ValueError("must end in .prom (node-exporter reads only *.prom files)")
        return value


class ExecutorSection(Section):
    """Where tasks run (docs/temporal.md): on this host, or on Temporal workers."""

    kind: Literal["local", "temporal"] = Field(
        default="local",
        description="`local`: this daemon spawns every task. `temporal`: `agentd serve` is the front door "
        "and `agentd worker` processes run the tasks (needs agentd[temporal]).",
    )
    target: str = Field(
        default="127.0.0.1:7233",
        min_length=1,
        max_length=500,
        description="The Temporal frontend, HOST:PORT (kind = temporal).",
    )
    namespace: str = Field(
        default="default", min_length=1, max_length=200, description="The Temporal namespace."
    )
    task_queue: str = Field(
        default="agentd",
        min_length=1,
        max_length=200,
        description="The task queue the front door starts workflows on and the workers poll.",
    )
    connect_timeout_s: Seconds = Field(
        default=10.0,
        gt=0,
        le=300,
        description="How long `serve`/`worker` start and each submit wait for the Temporal frontend.",
    )
    heartbeat_timeout_s: Seconds = Field(
        default=10.0,
        ge=1,
        le=600,
        description="A worker that sends no activity heartbeat for this long is lost: Temporal "
        "retries its task on another worker.",
    )

    @field_validator("target")
    @classmethod
    def _host_port(cls, value: str) -> str:
        host, sep, port = value.rpartition(":")
        if not sep or not host or not port.isdigit() or not 0 < int(port) < 65536:
            raise ValueError("must be HOST:PORT, e.g. temporal.internal:7233")
        return value


class TriggerSection(Section):
    """A reactive trigger (docs/design.md §11): a resource change on an MCP server becomes a task."""

    name: Name | None = Field(default=None, description="The trigger's name. Default: trigger-<n>.")
    server: Name = Field(description="The [mcp.*] server whose resource notifications are watched.")
    uri: str | None = Field(default=None, min_length=1, description="Exact resource URI (or use glob).")
    glob: str | None = Field(default=None, min_length=1, description="URI glob, `*` and `?` (or use uri).")
    route: Literal["spawn", "continue"] = Field(
        default="spawn",
        description="`spawn`: a new task per delivery; `continue`: one more turn of one warm session.",
    )
    instruction: str = Field(
        min_length=1,
        max_length=100_000,
        description="Task instruction; {uri}, {server} and {etag} are replaced ({{ and }} for braces).",
    )
    model: Name | None = Field(default=None, description="Intelligence endpoint. Default: defaults.model.")
    mcp: list[Name] | None = Field(
        default=None, description="MCP grant of the task. Default: defaults.mcp plus `server`."
    )
    debounce_ms: int = Field(default=250, ge=0, le=3_600_000, description="Trailing debounce per URI.")
    max_wait_ms: int = Field(
        default=2000, ge=0, le=3_600_000, description="Longest a delivery is held back by debouncing."
    )
    max_inflight: int = Field(default=4, ge=1, le=1000, description="route spawn: tasks running at once.")
    overflow: Literal["coalesce", "drop_oldest", "drop_newest"] = Field(
        default="coalesce", description="What happens to deliveries beyond max_inflight."
    )
    prestart: bool = Field(
        default=True,
        description="route spawn: fork and prepare a URI's task while its debounce window is open.",
    )
    daily_cost: float | None = Field(
        default=None,
        ge=0,
        description="route spawn: USD the trigger's tasks may spend a UTC day; later deliveries wait "
        "for the next day (docs/budgets.md). Unset: no cap.",
    )
    on_arm: Literal["deliver", "skip"] = Field(
        default="deliver",
        description="The 'possibly changed' per URI after the watcher (re)arms or the trigger resumes: "
        "`deliver` it (nothing changed meanwhile is missed) or `skip` it (only real changes start tasks).",
    )
    # route = "continue" (docs/warm-sessions.md): each delivery's turn, and the session's life.
    turn_max_steps: int = Field(
        default=20, ge=1, le=100_000, description="route continue: model steps one delivery's turn may take."
    )
    turn_max_tokens: int = Field(
        default=50_000, ge=1, description="route continue: tokens one delivery's turn may spend."
    )
    turn_deadline: Duration = Field(
        default=300.0, gt=0, le=86_400, description="route continue: how long one delivery's turn may run."
    )
    session_max_tokens: int = Field(
        default=1_000_000, ge=1, description="route continue: tokens the session may spend over its life."
    )
    session_idle_timeout: Duration = Field(
        default=3600.0,
        gt=0,
        le=7 * 86_400,
        description="route continue: with no delivery for this long the session ends (and resumes fresh).",
    )
    session_max_life: Duration = Field(
        default=86_400.0, gt=0, description="route continue: the longest one session runs before it ends."
    )


class ScheduleSection(Section):
    """A schedule the daemon owns (docs/design.md §11): recurring work shipped with the service. Exactly
    one of `cron`, `every`, `loop = true`. Its fires run as the daemon's user."""

    name: Name = Field(description="The schedule's name; unique. `agentd schedules` shows it.")
    instruction: str = Field(min_length=1, max_length=100_000, description="What each fire's task does.")
    cron: str | None = Field(
        default=None, min_length=1, max_length=256, description="5-field cron expression (minute first)."
    )
    tz: str | None = Field(
        default=None, min_length=1, max_length=64, description="IANA time zone of `cron`. Default: UTC."
    )
    every: Duration | None = Field(default=None, ge=1, description="Fire every this long (at least 1s).")
    loop: bool = Field(default=False, description="Run again after each run ends (loop mode).")
    interval: Duration = Field(default=0.0, ge=0, description="Loop mode: the pause between runs.")
    max_runs: int | None = Field(default=None, ge=1, description="Fires in all; then the schedule ends.")
    missed: Literal["skip", "catch_up_one"] = Field(
        default="skip", description="A fire missed while the daemon was down: `skip` it, or run it once."
    )
    overlap: Literal["skip", "allow"] = Field(
        default="skip", description="A fire due while the previous one runs: `skip` (recorded) or `allow`."
    )
    max_failures: int = Field(
        default=3, ge=1, le=1000, description="Crashed runs in a row that end the schedule."
    )
    idle_backoff_max: Duration = Field(
        default=900.0, ge=1, description="Loop mode: the longest pause idle runs back off to."
    )
    max_total_tokens: int | None = Field(
        default=None, ge=1, description="Tokens all fires may spend; then the schedule pauses."
    )
    daily_cost: float | None = Field(
        default=None,
        ge=0,
        description="USD its fires may spend a day (of `tz`, else UTC); a fire past it waits for the "
        "next day (docs/budgets.md). Unset: no cap.",
    )
    model: Name | None = Field(default=None, description="Intelligence endpoint. Default: defaults.model.")
    mcp: list[Name] | None = Field(default=None, description="MCP grant of each fire. Default: defaults.mcp.")
    max_steps: int | None = Field(default=None, ge=1, description="Per fire: model turns.")
    max_tokens: int | None = Field(default=None, ge=1, description="Per fire: tokens.")
    deadline: Duration | None = Field(default=None, gt=0, description="Per fire: wall-clock limit.")
