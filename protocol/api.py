"""The daemon's unix-socket API (docs/design.md §9): one request model per method, its params and its result.

Same framing as the control channel (NDJSON JSON-RPC 2.0, envelope in `protocol.jsonrpc`) with a
1 MiB frame cap (`MAX_API_FRAME`). The cap and the error codes are defined in `protocol.lines` and
`protocol.envelope`, which a client reading plain JSON imports without these models.
`REQUEST_ADAPTER` validates what a daemon may receive (the `method`-discriminated `ApiRequest`),
`REPLY_ADAPTER` what a client may receive; each request type names its result type
(`Request[ResultT]`), so server and client agree on every result's shape. A client names
intelligence endpoints and MCP servers from the daemon's configuration; it never supplies a
command line, a URL or a secret.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Annotated, Any, ClassVar, Generic, Literal, TypeVar, cast, get_args

from pydantic import (
    BaseModel,
    ConfigDict,
    Discriminator,
    Field,
    JsonValue,
    Tag,
    TypeAdapter,
    field_validator,
    model_validator,
)

from protocol.contract import OutputContract
from protocol.envelope import DRAINING as DRAINING
from protocol.envelope import FORBIDDEN as FORBIDDEN
from protocol.envelope import IDEMPOTENCY_CONFLICT as IDEMPOTENCY_CONFLICT
from protocol.envelope import INVALID_SPEC as INVALID_SPEC
from protocol.envelope import NOT_FOUND as NOT_FOUND
from protocol.envelope import QUOTA_EXCEEDED as QUOTA_EXCEEDED
from protocol.envelope import TOO_MANY_CONNECTIONS as TOO_MANY_CONNECTIONS
from protocol.envelope import UNAVAILABLE as UNAVAILABLE
from protocol.jsonrpc import ErrorResponse, Message, RequestId, Response, message_kind
from protocol.lines import MAX_API_FRAME as MAX_API_FRAME
from protocol.names import Handle, Name
from protocol.result import AbortKind, RunError, RunUsage, TerminalStatus
from protocol.transcript import StepItem

TaskState = Literal["queued", "starting", "running", "terminal"]
# What a view shows: a running task (or node) holding a tool call for a person's approval is
# `awaiting_approval`, and a task whose budget ran out with `on_budget = "pause"` is
# `awaiting_budget` (it waits for `agentd extend`): states of a live task, not terminal statuses.
ViewState = Literal["queued", "starting", "running", "awaiting_approval", "awaiting_budget", "terminal"]


# The models and adapters of this module are built at their first use, not at import
# (`defer_build`): a CLI command needs a handful of the ≈70 and paid ≈0.2 s of CPU building them
# all (docs/decisions.md). The daemon builds them all at start (`build_all`). A default that is a
# model is made with `model_construct()`, which does not build its model either.
_DEFERRED = ConfigDict(defer_build=True)


def _adapter(type_: Any) -> TypeAdapter[Any]:
    """A TypeAdapter built at its first use (a model's adapter follows the model's own config)."""
    if isinstance(type_, type) and issubclass(type_, BaseModel):
        return TypeAdapter(type_)
    return TypeAdapter(type_, config=_DEFERRED)


class _Model(BaseModel):
    model_config = ConfigDict(defer_build=True, extra="forbid", frozen=True)


class SpecLimits(_Model):
    max_steps: int | None = Field(default=None, ge=1, le=100_000)
    max_tokens: int | None = Field(default=None, ge=1)
    deadline_s: float | None = Field(default=None, gt=0, le=7 * 24 * 3600)
    # USD for the whole task tree; every endpoint of the task's chain must have a price.
    max_cost: float | None = Field(default=None, gt=0, le=1_000_000)


class LoopOverrides(_Model):
    """Per-task overrides of the loop knobs (unset: the daemon's `[loop]`)."""

    repeat_cap: int | None = Field(default=None, ge=1, le=100)
    idle_limit: int | None = Field(default=None, ge=1, le=100)
    keep_verbatim: int | None = Field(default=None, ge=0, le=1000)
    compaction_high_water: float | None = Field(default=None, gt=0, le=1)
    vacuous_reasks: int | None = Field(default=None, ge=0, le=10)
    catalogue_bytes: int | None = Field(default=None, ge=0, le=1_000_000)


class RetryPolicy(_Model):
    """What happens to a run interrupted by a supervisor restart."""

    # Invariant: a task runs at most `max_attempts` times in all (1 = never requeued).
    max_attempts: int = Field(default=2, ge=1, le=10)


class ForkOrigin(_Model):
    """The task and step a forked task's transcript was copied from (`agentd fork`)."""

    task_id: str = Field(min_length=1, max_length=64)
    step: int = Field(ge=0)


class TaskSpec(_Model):
    """What a client submits. Names refer to the daemon's config; nothing here is executable."""

    instruction: str = Field(min_length=1, max_length=1_000_000)
    model: Name | None = None
    mcp: list[Name] = Field(default_factory=list, max_length=64)
    limits: SpecLimits = SpecLimits.model_construct()
    output_contract: OutputContract = OutputContract()
    loop: LoopOverrides = LoopOverrides.model_construct()
    retry: RetryPolicy = RetryPolicy.model_construct()
    labels: dict[Annotated[str, Field(max_length=64)], Annotated[str, Field(max_length=256)]] = Field(
        default_factory=dict, max_length=32
    )
    # Tool calls that wait for a person's approval, added to the operator's (never removing one):
    # `server/tool_glob`, or `tool_glob` for every granted server (`agentd submit --approve`).
    approve: list[Annotated[str, Field(min_length=1, max_length=200)]] = Field(
        default_factory=list, max_length=64
    )
    # When the step or token budget runs out: end `exhausted_*`, or wait for `agentd extend`
    # (`awaiting_budget`). None: the daemon's `[defaults] on_budget`.
    on_budget: Literal["end", "pause"] | None = None


class ThrottleView(_Model):
    """A running task's model request waiting for a slot of an endpoint's provider limits
    (docs/budgets.md): the endpoint, the limit that holds it, and for how long so far."""

    endpoint: str
    blocked_by: str
    waiting_s: float = Field(ge=0)


class DeferralView(_Model):
    """A queued task a daily cap holds back (docs/budgets.md): until when (UTC seconds, the start
    of the cap's next day) and why."""

    until: float
    reason: str


class TaskView(_Model):
    """A task as the API reports it."""

    task_id: str
    run_id: str
    owner_uid: int
    state: ViewState
    status: TerminalStatus | None = None
    exit_code: int | None = None
    result: JsonValue = None
    partial: bool = False
    usage: RunUsage = RunUsage()
    abort: AbortKind | None = None
    error: RunError | None = None
    attempts: int = 0
    instruction: str = ""
    model: str | None = None
    mcp: list[str] = Field(default_factory=list)
    created_at: float = 0.0
    started_at: float | None = None
    ended_at: float | None = None
    pid: int | None = None
    # The schedule this task is a fire of (`agentd list --schedule ID`); None for a plain submit.
    schedule_id: str | None = None
    # The reactive trigger this task is a delivery of, and the URI it is about (docs/triggers.md).
    trigger: str | None = None
    uri: str | None = None
    # Which executor ran the task (`local`, `temporal`) and where (host or Temporal worker identity).
    executor: str | None = None
    worker: str | None = None
    # Runs that went on from the journaled transcript instead of starting again (docs/durability.md).
    resumes: int = 0
    # The task and step this one was forked from (`agentd fork`).
    forked_from: ForkOrigin | None = None
    # Set while a model request of the running task waits for a provider-limit slot.
    throttled: ThrottleView | None = None
    # Set while the queued task waits for the next day of a spent daily cap.
    deferred: DeferralView | None = None


class NodeView(_Model):
    """One subagent of a task's tree (handle `0` is the root)."""

    handle: str
    parent: str | None
    depth: int
    status: TerminalStatus | None = None
    state: Literal["starting", "running", "awaiting_approval", "terminal"] = "starting"
    pid: int | None = None
    usage: RunUsage = RunUsage()
    grant_steps: int | None = None
    grant_tokens: int | None = None


class EventView(_Model):
    """One journaled event of a task."""

    seq: int
    ts: float
    event: str
    fields: dict[str, JsonValue] = Field(default_factory=dict)


# ---- method params / results ---------------------------------------------------------------


class SubmitParams(_Model):
    spec: TaskSpec
    idempotency_key: str | None = Field(default=None, min_length=1, max_length=128)


class SubmitResult(_Model):
    task_id: str
    state: TaskState
    created: bool


class TaskRef(_Model):
    task_id: str = Field(min_length=1, max_length=64)


class ExtendParams(_Model):
    """More budget for a task that waits for it (`awaiting_budget`): added to what it had."""

    task_id: str = Field(min_length=1, max_length=64)
    steps: int | None = Field(default=None, ge=1, le=100_000)
    tokens: int | None = Field(default=None, ge=1)
    deadline_s: float | None = Field(default=None, gt=0)


class ForkParams(_Model):
    """A new task whose run starts from the first `from_step` steps of `task_id`'s (the same
    servers and budgets), on another model or with another instruction if given."""

    task_id: str = Field(min_length=1, max_length=64)
    from_step: int = Field(ge=0)
    model: Name | None = None
    instruction: str | None = Field(default=None, min_length=1, max_length=1_000_000)
    idempotency_key: str | None = Field(default=None, min_length=1, max_length=128)


class CancelParams(_Model):
    task_id: str = Field(min_length=1, max_length=64)
    reason: str = Field(default="cancelled by client", max_length=1000)


class WaitParams(_Model):
    task_id: str = Field(min_length=1, max_length=64)
    timeout_s: float | None = Field(default=None, ge=0, le=7 * 24 * 3600)


class ListParams(_Model):
    """A page of the caller's tasks, newest first: `limit` of them, submitted before the task
    `before` (the last task id of the previous page). Each is a summary: the instruction cut to
    200 characters and no result (`task.get` has the whole task)."""

    state: TaskState | None = None
    limit: int = Field(default=50, ge=1, le=1000)
    before: str | None = Field(default=None, min_length=1, max_length=64)
    # Only the fires of this schedule.
    schedule_id: str | None = Field(default=None, min_length=1, max_length=64)
    # Only the deliveries of this reactive trigger (docs/triggers.md).
    trigger: str | None = Field(default=None, min_length=1, max_length=64)


class MatchParams(_Model):
    """The ids of the caller's tasks (an admin's: every task's) that start with `prefix`, in id
    order, at most `limit`: how a client turns a short id a person typed into the task it names
    (docs/decisions.md, "Short task ids")."""

    prefix: str = Field(min_length=1, max_length=64)
    limit: int = Field(default=10, ge=1, le=100)

    @field_validator("prefix")
    @classmethod
    def _id_characters(cls, value: str) -> str:
        if not all(char.isascii() and (char.isalnum() or char == "_") for char in value):
            raise ValueError("a task id (or its start) is letters, digits and _ only")
        return value


class TaskMatches(_Model):
    """The answer to `task.match`: the matching ids, in id order (none: no such task)."""

    task_ids: list[str]


class EventsParams(_Model):
    task_id: str = Field(min_length=1, max_length=64)
    after_seq: int = Field(default=0, ge=0)
    follow: bool = False


class WatchParams(_Model):
    """Follow the state of every task the caller may see (its own; an admin, every task) on one
    connection: first the view of each of `task_ids` that is the caller's (another's, or a
    missing one, is left out), then a view each time a task's state or status changes."""

    task_ids: list[Annotated[str, Field(min_length=1, max_length=64)]] = Field(
        default_factory=list, max_length=1000
    )


class TranscriptParams(_Model):
    """One page of a node's transcript (docs/durability.md): the items after `after_seq`. With
    `wait_s`, an empty page waits that long for the next item (or the task's end) first."""

    task_id: str = Field(min_length=1, max_length=64)
    handle: Handle = "0"
    after_seq: int = Field(default=0, ge=0)
    limit: int = Field(default=200, ge=1, le=1000)
    wait_s: float = Field(default=0.0, ge=0, le=30)


class TranscriptStep(_Model):
    seq: int
    ts: float
    item: StepItem


class TranscriptView(_Model):
    """A page of one node's transcript, with what a reader needs around it. `next_seq` is the
    `after_seq` of the next page; `more` says whether items past it were held back (the page's
    size bound)."""

    task_id: str
    handle: str
    state: ViewState
    instruction: str
    handles: list[str] = Field(default_factory=list)
    steps: list[TranscriptStep] = Field(default_factory=list)
    next_seq: int = 0
    more: bool = False


class NoParams(_Model):
    """Params of a method that takes none (`{}` or absent)."""


class DaemonStatus(_Model):
    pid: int
    version: str
    uptime_s: float
    draining: bool
    queued: int
    running: int
    max_concurrent_tasks: int
    journal_ok: bool
    degraded: list[str] = Field(default_factory=list)
    children: int = 0  # the processes the daemon supervises, counted at most once a second
    # "daemon": queued/running/children count everyone's (the caller is an admin); "caller": only
    # the caller's own tasks, and `children` is 0 — other users' load is not a non-admin's business.
    scope: Literal["daemon", "caller"] = "daemon"
    # The zygote spawner: "warm" forks children, "starting" makes spawns wait for it (bounded),
    # "failed" (dead, restarting or given up) execs them, "off" with `spawner = "exec"`.
    zygote: Literal["warm", "starting", "failed", "off"] = "off"
    # Reactive triggers by state (`armed`, `failed`, ...), and the names of the failed ones.
    triggers: dict[str, int] = Field(default_factory=dict)
    failed_triggers: list[str] = Field(default_factory=list)


# ---- reactive triggers (docs/design.md §11; docs/triggers.md) ----------------------------------------

# starting: its watcher is being spawned or connecting; armed: subscribed, changes become tasks;
# unsupported: the server cannot notify (not retried); backoff: the watcher died and waits to be
# restarted; failed: it died too often (until a reload or `agentd triggers restart`); paused: an
# operator paused it (changes are not delivered; it survives a restart).
TriggerState = Literal["starting", "armed", "unsupported", "backoff", "failed", "paused"]


class TriggerView(_Model):
    name: str
    server: str
    uri: str | None = None
    glob: str | None = None
    route: Literal["spawn", "continue"] = "spawn"
    state: TriggerState = "starting"
    # Debounced deliveries since the daemon started; tasks it started in all (journal); the last.
    deliveries: int = 0
    dropped: int = 0
    tasks_started: int = 0
    inflight: int = 0
    waiting: int = 0
    last_fired_at: float | None = None
    last_error: str | None = None
    # The URIs its watcher subscribed that this trigger owns (a count: a glob may match many).
    subscribed: int = 0


class TriggerRef(_Model):
    name: str = Field(min_length=1, max_length=64)


# ---- approvals --------------------------------------------------------------------

ApprovalState = Literal["pending", "approved", "denied", "expired", "withdrawn"]


class ApprovalView(_Model):
    """One gated tool call and its decision. Visible only to those who may decide it: the task's
    owner and admins (the daemon's uid, root, the admin group). Times are UTC epoch seconds."""

    call: str
    task_id: str
    handle: str
    owner_uid: int
    server: str
    tool: str
    arguments: JsonValue = None
    instruction: str = ""
    state: ApprovalState
    requested_at: float
    expires_at: float
    decided_at: float | None = None
    decided_by: int | None = None
    reason: str | None = None


class ApprovalListParams(_Model):
    """Pending requests the caller may decide (one task's, or all), oldest first."""

    task_id: str | None = Field(default=None, min_length=1, max_length=64)
    limit: int = Field(default=100, ge=1, le=1000)


class ApprovalDecideParams(_Model):
    """Approve or deny a pending request; `call` may be left out when the task has exactly one."""

    task_id: str = Field(min_length=1, max_length=64)
    call: str | None = Field(default=None, min_length=1, max_length=64)
    approve: bool
    reason: str | None = Field(default=None, max_length=1000)


# ---- schedules (docs/design.md §11) ------------------------------------------------------------------

ScheduleKind = Literal["cron", "interval", "loop"]
ScheduleState = Literal["active", "paused", "ended"]
MAX_EVERY_S = 366 * 24 * 3600.0


class ScheduleSpec(_Model):
    """When a schedule's task runs. `cron`: a 5-field expression on the wall clock of `tz` (UTC
    without one); `interval`: every `every_s` from creation; `loop`: again after each run ends,
    `interval_s` later. The cron syntax and the zone's name are checked by the daemon."""

    kind: ScheduleKind
    cron: str | None = Field(default=None, min_length=1, max_length=256)
    tz: str | None = Field(default=None, min_length=1, max_length=64)
    every_s: float | None = Field(default=None, ge=1, le=MAX_EVERY_S)
    interval_s: float = Field(default=0.0, ge=0, le=MAX_EVERY_S)
    # Invariant: the schedule ends once this many fires have run.
    max_runs: int | None = Field(default=None, ge=1, le=10_000_000)
    # A fire due while the daemon was down (or more than a second late): `skip` it, or fire once.
    missed: Literal["skip", "catch_up_one"] = "skip"
    # A fire due while the previous fire still runs: `skip` it (recorded), or `allow` both.
    overlap: Literal["skip", "allow"] = "skip"
    # This many crashed runs in a row end the schedule (the last error is kept).
    max_failures: int = Field(default=3, ge=1, le=1000)
    # A loop run that reports nothing done doubles the pause up to this.
    idle_backoff_max_s: float = Field(default=900.0, ge=1, le=MAX_EVERY_S)
    # Tokens all fires together may spend; once spent the schedule pauses.
    max_total_tokens: int | None = Field(default=None, ge=1)
    # USD its fires may spend a day (of `tz`, else UTC); a fire past it waits for the next day.
    daily_cost: float | None = Field(default=None, ge=0)

    @model_validator(mode="after")
    def _fields_match_kind(self) -> ScheduleSpec:
        wanted = {"cron": "cron", "interval": "every_s"}.get(self.kind)
        for name in ("cron", "every_s"):
            value = getattr(self, name)
            if name == wanted and value is None:
                raise ValueError(f"{name} is required for a {self.kind} schedule")
            if name != wanted and value is not None:
                raise ValueError(f"{name} does not apply to a {self.kind} schedule")
        if self.tz is not None and self.kind != "cron":
            raise ValueError(f"tz applies only to a cron schedule, not {self.kind}")
        if self.interval_s and self.kind != "loop":
            raise ValueError(f"interval_s applies only to a loop schedule, not {self.kind}")
        return self


class ScheduleView(_Model):
    """A schedule as the API reports it. Times are UTC seconds since the epoch."""

    schedule_id: str
    owner_uid: int
    name: str | None = None  # a `[[schedule]]` from the daemon's config
    trigger: ScheduleSpec
    instruction: str = ""
    state: ScheduleState
    note: str | None = None  # why it is paused or ended
    next_fire_at: float | None = None
    runs: int = 0
    failures: int = 0
    skipped: int = 0
    tokens_used: int = 0
    pause_s: float | None = None
    last_task_id: str | None = None
    last_status: TerminalStatus | None = None
    last_error: str | None = None
    last_fire_at: float | None = None
    created_at: float = 0.0


class ScheduleCreateParams(_Model):
    spec: TaskSpec  # what each fire runs; its limits are per fire
    trigger: ScheduleSpec
    idempotency_key: str | None = Field(default=None, min_length=1, max_length=128)


class ScheduleCreateResult(_Model):
    schedule_id: str
    state: ScheduleState
    next_fire_at: float | None
    created: bool


class ScheduleRef(_Model):
    schedule_id: str = Field(min_length=1, max_length=64)


class ScheduleListParams(_Model):
    """A page of the caller's schedules, oldest first: `limit` of them, created after the schedule
    `after` (the last schedule id of the previous page). Each view's instruction is cut to 200
    characters (`schedule.get` has it whole)."""

    state: ScheduleState | None = None
    limit: int = Field(default=100, ge=1, le=1000)
    after: str | None = Field(default=None, min_length=1, max_length=64)


class BudgetLine(_Model):
    """One daily cap's day (docs/budgets.md): whose it is, what was spent, the cap, when it resets.
    `kind` `uid` names a user (`name` is the uid), `trigger` a trigger, `schedule` a schedule's id."""

    kind: Literal["uid", "trigger", "schedule"]
    name: str
    owner_uid: int | None = None
    day: str
    zone: str = "UTC"
    resets_at: float
    spent_usd: float = 0.0
    spent_tokens: int = 0
    cap_usd: float | None = None
    cap_tokens: int | None = None


class DeferredTaskView(_Model):
    task_id: str
    owner_uid: int
    trigger: str | None = None
    schedule_id: str | None = None
    until: float
    reason: str


class BudgetsView(_Model):
    """Today's spend against each daily cap the caller may see, and the tasks the caps defer."""

    now: float
    lines: list[BudgetLine] = Field(default_factory=list)
    deferred: list[DeferredTaskView] = Field(default_factory=list)


# ---- requests: one model per method, typed by its result ----------------------------------

ResultT = TypeVar("ResultT")


class Request(Message, Generic[ResultT]):
    """A request of the API; `ResultT` is the type of the result that answers it.

    Subclass `Request[SomeResult]`: the result's adapter is derived from that argument, so a
    method's request and its result are declared together, once.
    """

    model_config = _DEFERRED  # merged with Message's

    # Invariant: unique among a connection's requests in flight. `ApiClient` numbers its
    # requests itself, so a caller leaves the default.
    id: RequestId = 0
    method: str
    result_adapter: ClassVar[TypeAdapter[Any]]

    @classmethod
    def __pydantic_init_subclass__(cls, **kwargs: Any) -> None:
        super().__pydantic_init_subclass__(**kwargs)
        generic = cls.__pydantic_generic_metadata__
        if generic["origin"] is Request:  # `Request[X]` itself; its subclasses inherit the adapter
            (result_type,) = generic["args"]
            cls.result_adapter = _adapter(result_type)

    def validate_result(self, result: JsonValue) -> ResultT:
        """This request's result from its JSON value. Raises `pydantic.ValidationError`."""
        # The adapter was built from ResultT itself (see __pydantic_init_subclass__).
        return cast("ResultT", self.result_adapter.validate_python(result))

    def dump_result(self, result: ResultT) -> bytes:
        """A result of this request as JSON, as it goes on the wire."""
        return self.result_adapter.dump_json(result)


class SubmitRequest(Request[SubmitResult]):
    method: Literal["task.submit"] = "task.submit"
    params: SubmitParams


class GetRequest(Request[TaskView]):
    method: Literal["task.get"] = "task.get"
    params: TaskRef


class MatchRequest(Request[TaskMatches]):
    method: Literal["task.match"] = "task.match"
    params: MatchParams


class ListRequest(Request[list[TaskView]]):
    method: Literal["task.list"] = "task.list"
    params: ListParams = ListParams.model_construct()


class CancelRequest(Request[TaskView]):
    method: Literal["task.cancel"] = "task.cancel"
    params: CancelParams


class WaitRequest(Request[TaskView]):
    method: Literal["task.wait"] = "task.wait"
    params: WaitParams


class EventsRequest(Request[TaskView]):
    """Streams the task's events as `task.event` notifications; the result is the task as it
    stands after the stream ended (with `follow`, terminal)."""

    method: Literal["task.events"] = "task.events"
    params: EventsParams


class WatchEnded(_Model):
    """The answer that ends a `task.watch` stream: the daemon stopped watching (it is stopping)."""


class WatchRequest(Request[WatchEnded]):
    """Streams `task.changed` notifications until the client goes away or the daemon stops."""

    method: Literal["task.watch"] = "task.watch"
    params: WatchParams = WatchParams.model_construct(task_ids=[])


class TreeRequest(Request[list[NodeView]]):
    method: Literal["task.tree"] = "task.tree"
    params: TaskRef


class StatusRequest(Request[DaemonStatus]):
    method: Literal["daemon.status"] = "daemon.status"
    params: NoParams = NoParams.model_construct()


class ApprovalListRequest(Request[list[ApprovalView]]):
    method: Literal["approval.list"] = "approval.list"
    params: ApprovalListParams = ApprovalListParams.model_construct()


class ExtendRequest(Request[TaskView]):
    method: Literal["task.extend"] = "task.extend"
    params: ExtendParams


class ForkRequest(Request[SubmitResult]):
    method: Literal["task.fork"] = "task.fork"
    params: ForkParams


class TranscriptRequest(Request[TranscriptView]):
    method: Literal["task.transcript"] = "task.transcript"
    params: TranscriptParams


class ApprovalDecideRequest(Request[ApprovalView]):
    method: Literal["approval.decide"] = "approval.decide"
    params: ApprovalDecideParams


class ScheduleCreateRequest(Request[ScheduleCreateResult]):
    method: Literal["schedule.create"] = "schedule.create"
    params: ScheduleCreateParams


class ScheduleListRequest(Request[list[ScheduleView]]):
    method: Literal["schedule.list"] = "schedule.list"
    params: ScheduleListParams = ScheduleListParams.model_construct()


class ScheduleGetRequest(Request[ScheduleView]):
    method: Literal["schedule.get"] = "schedule.get"
    params: ScheduleRef


class SchedulePauseRequest(Request[ScheduleView]):
    method: Literal["schedule.pause"] = "schedule.pause"
    params: ScheduleRef


class ScheduleResumeRequest(Request[ScheduleView]):
    method: Literal["schedule.resume"] = "schedule.resume"
    params: ScheduleRef


class ScheduleDeleteRequest(Request[ScheduleView]):
    """Ends the schedule for good (no more fires; a fire already running goes on)."""

    method: Literal["schedule.delete"] = "schedule.delete"
    params: ScheduleRef


class TriggerListRequest(Request[list[TriggerView]]):
    method: Literal["trigger.list"] = "trigger.list"
    params: NoParams = NoParams.model_construct()


class BudgetsRequest(Request[BudgetsView]):
    """Today's spend, the daily caps and what they defer: the caller's own; an admin's, everyone's."""

    method: Literal["budget.list"] = "budget.list"
    params: NoParams = NoParams.model_construct()


class TriggerPauseRequest(Request[TriggerView]):
    """Admin only: changes are no longer delivered (the watcher stays armed); survives a restart."""

    method: Literal["trigger.pause"] = "trigger.pause"
    params: TriggerRef


class TriggerResumeRequest(Request[TriggerView]):
    """Admin only: deliver again, starting with one "possibly changed" per subscribed URI."""

    method: Literal["trigger.resume"] = "trigger.resume"
    params: TriggerRef


class TriggerRestartRequest(Request[TriggerView]):
    """Admin only: restart the trigger's watcher now and forget its restart count (a `failed`
    trigger is tried again)."""

    method: Literal["trigger.restart"] = "trigger.restart"
    params: TriggerRef


ApiRequest = Annotated[
    SubmitRequest
    | GetRequest
    | ListRequest
    | MatchRequest
    | CancelRequest
    | WaitRequest
    | EventsRequest
    | WatchRequest
    | TreeRequest
    | TranscriptRequest
    | ForkRequest
    | ExtendRequest
    | StatusRequest
    | ScheduleCreateRequest
    | ScheduleListRequest
    | ScheduleGetRequest
    | SchedulePauseRequest
    | ScheduleResumeRequest
    | ScheduleDeleteRequest
    | ApprovalListRequest
    | ApprovalDecideRequest
    | TriggerListRequest
    | TriggerPauseRequest
    | TriggerResumeRequest
    | TriggerRestartRequest
    | BudgetsRequest,
    Field(discriminator="method"),
]

REQUEST_ADAPTER: TypeAdapter[ApiRequest] = _adapter(ApiRequest)

# Derived from the union, which stays the one list of methods.
REQUEST_TYPES: Mapping[str, type[Request[Any]]] = {
    cls.model_fields["method"].default: cls for cls in get_args(get_args(ApiRequest)[0])
}
METHODS = frozenset(REQUEST_TYPES)


# ---- replies: what a client reads -----------------------------------------------------------


class EventNotification(Message):
    """One event of a task, streamed by `task.events` before its response."""

    model_config = _DEFERRED  # merged with Message's

    method: Literal["task.event"] = "task.event"
    params: EventView


EVENT_NOTIFICATION: str = EventNotification.model_fields["method"].default


class TaskChangedNotification(Message):
    """A task whose state or status changed, streamed by `task.watch`."""

    model_config = _DEFERRED  # merged with Message's

    method: Literal["task.changed"] = "task.changed"
    params: TaskView


TASK_CHANGED: str = TaskChangedNotification.model_fields["method"].default

ApiReply = Annotated[
    Annotated[EventNotification, Tag(EVENT_NOTIFICATION)]
    | Annotated[TaskChangedNotification, Tag(TASK_CHANGED)]
    | Annotated[Response, Tag("result")]
    | Annotated[ErrorResponse, Tag("error")],
    Discriminator(message_kind),
]

REPLY_ADAPTER: TypeAdapter[ApiReply] = _adapter(ApiReply)
REPLY_KINDS = frozenset({EVENT_NOTIFICATION, TASK_CHANGED, "result", "error"})


def build_all() -> None:
    """Build every model and adapter of the API now, for a process that serves it: its first
    request is then no slower than the rest."""
    for value in list(globals().values()):
        if isinstance(value, type) and issubclass(value, BaseModel) and value.__module__ == __name__:
            value.model_rebuild()
    for request_type in REQUEST_TYPES.values():
        request_type.result_adapter.rebuild()
    REQUEST_ADAPTER.rebuild()
    REPLY_ADAPTER.rebuild()
