"""The control channel between the supervisor and a subagent (docs/design.md §3).

JSON-RPC 2.0 messages, one per line, in the envelope of `protocol.jsonrpc`. Each method is a small
model discriminated by `method`; responses (which carry no method) are told apart by `result` /
`error`. `DOWN_ADAPTER` validates what a child may receive, `UP_ADAPTER` what a supervisor may
receive.
"""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import BaseModel, ConfigDict, Discriminator, Field, JsonValue, Tag, TypeAdapter

from protocol.events import EventName
from protocol.jsonrpc import ErrorResponse, Message, RequestId, Response, message_kind
from protocol.names import Name
from protocol.result import RunResult, RunUsage, TerminalStatus
from protocol.spawn import Handle, OutputContract, SeedMessage, SpawnPayload
from protocol.transcript import MAX_ITEMS_PER_RECORD, StepItem


class _Params(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


# ---- down: supervisor -> child -------------------------------------------------------------


class Spawn(Message):
    method: Literal["ctrl/spawn"] = "ctrl/spawn"
    params: SpawnPayload


class PingParams(_Params):
    seq: int = Field(ge=0)


class Ping(Message):
    id: RequestId
    method: Literal["ctrl/ping"] = "ctrl/ping"
    params: PingParams


class PingResult(_Params):
    seq: int = Field(ge=0)
    # Age of the child's event loop's last tick: large while the thread answers = wedged loop.
    loop_age_ms: int = Field(ge=0)


class CancelParams(_Params):
    reason: str = Field(default="cancelled", max_length=1000)


class Cancel(Message):
    method: Literal["ctrl/cancel"] = "ctrl/cancel"
    params: CancelParams = CancelParams()


class InjectParams(_Params):
    """One delivery to a warm session: `message` becomes one user turn (the supervisor writes it);
    `seq` is echoed in the `ev/turn` that answers it, so the supervisor matches the two."""

    message: str = Field(max_length=1_000_000)
    seq: int = Field(default=0, ge=0)


class Inject(Message):
    method: Literal["ctrl/inject"] = "ctrl/inject"
    params: InjectParams


class GoParams(_Params):
    """A held (prestarted) child may run: the task is journaled `running` now. `instruction`
    replaces the held payload's when the delivery changed meanwhile (a newer etag);
    `deadline_s` is the time left of the run's deadline, counted from this frame."""

    instruction: str | None = Field(default=None, min_length=1, max_length=1_000_000)
    deadline_s: float = Field(gt=0)


class Go(Message):
    method: Literal["ctrl/go"] = "ctrl/go"
    params: GoParams


# ---- up: child -> supervisor ---------------------------------------------------------------


class ReadyParams(_Params):
    pid: int = Field(gt=0)


class Ready(Message):
    method: Literal["ev/ready"] = "ev/ready"
    params: ReadyParams


class EventParams(_Params):
    event: EventName
    fields: dict[str, JsonValue] = Field(default_factory=dict)


class Event(Message):
    method: Literal["ev/event"] = "ev/event"
    params: EventParams


class UsageParams(_Params):
    """Usage of one model call: deltas, so a supervisor can sum them as they arrive."""

    tokens_in: int = Field(ge=0)
    tokens_out: int = Field(ge=0)
    steps: int = Field(ge=0)
    model: str = Field(max_length=256)
    # The endpoint that answered (its price applies), the input tokens its prompt cache served,
    # and whether the reply reported usage at all (else the counts are the child's estimates).
    endpoint: Name | None = None
    cached_in: int = Field(default=0, ge=0)
    reported: bool = True


class Usage(Message):
    method: Literal["ev/usage"] = "ev/usage"
    params: UsageParams


# Events, and usage reports, one frame carries at most (`ev/batch`, or riding on a `sup/record`).
MAX_NOTES_PER_FRAME = 256


class NotesParams(_Params):
    """Events and usage reports sent in one frame: the events in the order they happened, then
    the usage reports (deltas, so where they fall among the events does not matter)."""

    events: list[EventParams] = Field(default_factory=list, max_length=MAX_NOTES_PER_FRAME)
    usage: list[UsageParams] = Field(default_factory=list, max_length=MAX_NOTES_PER_FRAME)


class Batch(Message):
    """What a subagent reported since its last frame, in one frame: its events and usage reports
    are handled as `ev/event` and `ev/usage` frames would be, in order (docs/decisions.md)."""

    method: Literal["ev/batch"] = "ev/batch"
    params: NotesParams


class TurnParams(_Params):
    """A warm session's turn ended: the answer to the injection `seq`, its status and usage.

    `result` keeps its place as the answer (a partial one when `partial`); `usage` is this turn's
    alone (the session's is the sum, and its `ev/usage` frames were sent as usual).
    """

    seq: int = Field(default=0, ge=0)
    status: TerminalStatus
    result: JsonValue = None
    partial: bool = False
    usage: RunUsage = RunUsage()
    dur_ms: int = Field(default=0, ge=0)


class Turn(Message):
    method: Literal["ev/turn"] = "ev/turn"
    params: TurnParams


class Result(Message):
    method: Literal["ev/result"] = "ev/result"
    params: RunResult


class RequestedLimits(_Params):
    """What a parent asks for its child; each unset value takes the supervisor's default, and every
    value is capped by what the parent has left (docs/design.md §7)."""

    max_steps: int | None = Field(default=None, ge=1, le=100_000)
    max_tokens: int | None = Field(default=None, ge=1)
    deadline_s: float | None = Field(default=None, gt=0)


class SpawnRequestParams(_Params):
    """A child's request for a child. Identity fields are absent on purpose: the supervisor mints them."""

    instruction: str = Field(min_length=1, max_length=1_000_000)
    output_contract: OutputContract = OutputContract()
    context_seed: list[SeedMessage] = Field(default_factory=list, max_length=256)
    # Server names (`fs`) or single tools (`fs/read_file`) of the parent's grant; None = all of it.
    tool_scope: list[Annotated[str, Field(max_length=200)]] | None = Field(default=None, max_length=256)
    limits: RequestedLimits = RequestedLimits()
    wait: bool = True
    # The W3C trace context of the delegating tool call; the child's spans are traced under it.
    traceparent: str | None = Field(default=None, max_length=128)
    # The parent's tool call that asks: a resumed parent asking again for the same call is given
    # the child that call started, resumed from its own transcript (docs/durability.md).
    call_id: str | None = Field(default=None, max_length=256)

    # A forged identity claim is tolerated on the wire and ignored (never trusted).
    model_config = ConfigDict(extra="ignore", frozen=True)


class SupSpawn(Message):
    id: RequestId
    method: Literal["sup/spawn"] = "sup/spawn"
    params: SpawnRequestParams


class HandleParams(_Params):
    handle: Handle
    timeout_s: float | None = Field(default=None, ge=0)


class SupWait(Message):
    id: RequestId
    method: Literal["sup/wait"] = "sup/wait"
    params: HandleParams


class SupStatus(Message):
    id: RequestId
    method: Literal["sup/status"] = "sup/status"
    params: HandleParams


class ApproveParams(_Params):
    """A gated tool call the child holds until a person decides. The supervisor bounds
    the wait by `timeout_s` and by the node's deadline."""

    call_id: str = Field(max_length=200)
    server: str = Field(min_length=1, max_length=64)
    tool: str = Field(min_length=1, max_length=200)
    arguments: dict[str, JsonValue] = Field(default_factory=dict)
    timeout_s: float = Field(gt=0)


class SupApprove(Message):
    id: RequestId
    method: Literal["sup/approve"] = "sup/approve"
    params: ApproveParams


class ApproveResult(_Params):
    """The answer to `sup/approve`: run the call once (`approved`), or tell the model why not."""

    outcome: Literal["approved", "denied", "timeout"]
    reason: str | None = Field(default=None, max_length=1000)
    decider_uid: int | None = None
    call: str | None = Field(default=None, max_length=64)


class RecordParams(NotesParams):
    """Transcript items to journal (protocol/transcript.py); answered once they are committed,
    so the child acts on a step (runs a tool, shows a result to its model) only after that.
    The events and usage reports that came before the items ride along: they are handled first,
    so they are journaled no later than the items (in the same group commit, or an earlier one)."""

    items: list[StepItem] = Field(min_length=1, max_length=MAX_ITEMS_PER_RECORD)


class RecordResult(_Params):
    """The number of items the node's transcript holds now."""

    seq: int = Field(ge=0)


class SupRecord(Message):
    id: RequestId
    method: Literal["sup/record"] = "sup/record"
    params: RecordParams


class SlotParams(_Params):
    """A model request asks for a slot of a limited endpoint (docs/budgets.md) before it is sent;
    `tokens` is its estimate (input and most output), which the reply's usage corrects."""

    endpoint: Name
    tokens: int = Field(default=0, ge=0)


class SlotResult(_Params):
    """The slot: its `ticket` (named again when the request ends), how long it waited and, if it
    waited, the limit that held it."""

    ticket: int = Field(ge=0)
    waited_ms: int = Field(default=0, ge=0)
    blocked_by: str | None = Field(default=None, max_length=64)


class SupSlot(Message):
    id: RequestId
    method: Literal["sup/slot"] = "sup/slot"
    params: SlotParams


class SlotDoneParams(_Params):
    """A slot's request ended: its usage (None when the reply reported none), its HTTP status,
    and the wait the provider asked for (`Retry-After` of a 429 or 503), which holds every task's
    requests to that endpoint back; `rate_headers` are its rate-limit headers, as sent."""

    endpoint: Name
    ticket: int = Field(ge=0)
    tokens_used: int | None = Field(default=None, ge=0)
    status: int | None = None
    retry_after_s: float | None = Field(default=None, ge=0)
    rate_headers: dict[Annotated[str, Field(max_length=64)], Annotated[str, Field(max_length=128)]] = Field(
        default_factory=dict, max_length=32
    )


class SlotDone(Message):
    method: Literal["ev/slot"] = "ev/slot"
    params: SlotDoneParams


class LeaseParams(_Params):
    """A standing slot, handed out before it is asked for while the endpoint is far from its limits
    (docs/budgets.md, "Standing slots"): the child may start one request to `endpoint` under
    `ticket` without asking, when its estimate is at most `tokens` (None: any size); it reports the
    start (`ev/slot-start`) and the end (`ev/slot`) under that ticket."""

    endpoint: Name
    ticket: int = Field(ge=1)
    tokens: int | None = Field(default=None, ge=0)


class Lease(Message):
    method: Literal["ctrl/lease"] = "ctrl/lease"
    params: LeaseParams


class UnleaseParams(_Params):
    """Give a standing slot back if no request has started under it (`ev/slot`, no status)."""

    endpoint: Name
    ticket: int = Field(ge=1)


class Unlease(Message):
    method: Literal["ctrl/unlease"] = "ctrl/unlease"
    params: UnleaseParams


class SlotStartParams(_Params):
    """A request started under a standing slot, with its estimate (as `SlotParams.tokens`)."""

    endpoint: Name
    ticket: int = Field(ge=1)
    tokens: int = Field(default=0, ge=0)


class SlotStart(Message):
    method: Literal["ev/slot-start"] = "ev/slot-start"
    params: SlotStartParams


class SupCancel(Message):
    id: RequestId
    method: Literal["sup/cancel"] = "sup/cancel"
    params: HandleParams


DownMessage = Annotated[
    Annotated[Spawn, Tag("ctrl/spawn")]
    | Annotated[Ping, Tag("ctrl/ping")]
    | Annotated[Cancel, Tag("ctrl/cancel")]
    | Annotated[Inject, Tag("ctrl/inject")]
    | Annotated[Go, Tag("ctrl/go")]
    | Annotated[Lease, Tag("ctrl/lease")]
    | Annotated[Unlease, Tag("ctrl/unlease")]
    | Annotated[Response, Tag("result")]
    | Annotated[ErrorResponse, Tag("error")],
    Discriminator(message_kind),
]

UpMessage = Annotated[
    Annotated[Ready, Tag("ev/ready")]
    | Annotated[Event, Tag("ev/event")]
    | Annotated[Usage, Tag("ev/usage")]
    | Annotated[Batch, Tag("ev/batch")]
    | Annotated[Turn, Tag("ev/turn")]
    | Annotated[Result, Tag("ev/result")]
    | Annotated[SupSpawn, Tag("sup/spawn")]
    | Annotated[SupWait, Tag("sup/wait")]
    | Annotated[SupStatus, Tag("sup/status")]
    | Annotated[SupCancel, Tag("sup/cancel")]
    | Annotated[SupApprove, Tag("sup/approve")]
    | Annotated[SupRecord, Tag("sup/record")]
    | Annotated[SupSlot, Tag("sup/slot")]
    | Annotated[SlotDone, Tag("ev/slot")]
    | Annotated[SlotStart, Tag("ev/slot-start")]
    | Annotated[Response, Tag("result")]
    | Annotated[ErrorResponse, Tag("error")],
    Discriminator(message_kind),
]

DOWN_ADAPTER: TypeAdapter[DownMessage] = TypeAdapter(DownMessage)
UP_ADAPTER: TypeAdapter[UpMessage] = TypeAdapter(UpMessage)
