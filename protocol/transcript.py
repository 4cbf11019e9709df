"""A run's transcript as journaled steps: what a subagent hands its supervisor after each model
call and around each tool call, so a run interrupted anywhere resumes instead of restarting
(docs/durability.md).

Items are appended in the order they happened, per node of a task:

- `reply`: one model call's outcome (its text and tool calls, or a provider refusal, or a reply
  the adapter could not parse) with its usage; `overflow` and `tools_rejected` are the two
  outcomes that are errors, not replies, and change what the loop does next.
- `start`: a tool call is about to run. Journaled before it runs, so a call that has a `start`
  and no `result` is known to have been in flight.
- `result`: a tool call's outcome, journaled before the model sees it.
- `spawned`: the first item of a nested subagent's transcript, written by the supervisor: the
  tool call of its parent that asked for it. A resumed parent asking again for that call gets
  this child's resumed run, not a new child.
- `rewind`: a resumed run could not follow its journal past item `to` (its loop decided
  otherwise, e.g. its deadline now called for a wrap-up): the items after `to` are not replayed
  again; what follows the rewind is.

Nothing secret enters an item: model text, tool arguments and tool results only (never an API
key, header or token). Tool-result images are not kept; their text placeholders are.
"""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import BaseModel, ConfigDict, Discriminator, Field, JsonValue, TypeAdapter

from protocol.result import RunUsage

# One item's text fields are cut here (a tool result can be megabytes; the frame cap is 16 MiB).
MAX_ITEM_TEXT = 1_000_000
# Items per `sup/record` frame.
MAX_ITEMS_PER_RECORD = 64
ModelPurpose = Literal["turn", "compact", "wrap_up"]


class _Item(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class CallItem(_Item):
    """One tool call as the model asked for it (`arguments` None: they were not a JSON object)."""

    id: str = Field(max_length=256)
    name: str = Field(max_length=256)
    arguments: dict[str, JsonValue] | None = None
    arguments_error: str | None = Field(default=None, max_length=2000)
    raw_arguments: str = Field(default="", max_length=MAX_ITEM_TEXT)


class ReplyItem(_Item):
    kind: Literal["reply"] = "reply"
    purpose: ModelPurpose = "turn"
    text: str = Field(default="", max_length=MAX_ITEM_TEXT)
    tool_calls: list[CallItem] = Field(default_factory=list, max_length=256)
    refusal: str | None = Field(default=None, max_length=MAX_ITEM_TEXT)
    malformed: str | None = Field(default=None, max_length=10_000)
    unparsed_tool_call: bool = False
    finish_reason: str | None = Field(default=None, max_length=64)
    model: str = Field(default="", max_length=256)
    # None when the provider reported no usage (the loop then estimated it, and will again).
    tokens_in: int | None = Field(default=None, ge=0)
    tokens_out: int | None = Field(default=None, ge=0)


class OverflowItem(_Item):
    """The endpoint refused the request as longer than its context window."""

    kind: Literal["overflow"] = "overflow"
    purpose: ModelPurpose = "turn"


class ToolsRejectedItem(_Item):
    """The endpoint refused the request's tools (an `auto` run switched to JSON actions)."""

    kind: Literal["tools_rejected"] = "tools_rejected"
    detail: str = Field(default="", max_length=2000)


class StartItem(_Item):
    kind: Literal["start"] = "start"
    call_id: str = Field(max_length=256)
    name: str = Field(max_length=256)


class ResultItem(_Item):
    kind: Literal["result"] = "result"
    call_id: str = Field(max_length=256)
    name: str = Field(max_length=256)
    text: str = Field(default="", max_length=MAX_ITEM_TEXT)
    is_error: bool = False


class SpawnedItem(_Item):
    kind: Literal["spawned"] = "spawned"
    call_id: str = Field(max_length=256)


class RewindItem(_Item):
    kind: Literal["rewind"] = "rewind"
    to: int = Field(ge=0)
    why: str = Field(default="", max_length=500)


StepItem = Annotated[
    ReplyItem | OverflowItem | ToolsRejectedItem | StartItem | ResultItem | SpawnedItem | RewindItem,
    Discriminator("kind"),
]
STEP_ITEM_ADAPTER: TypeAdapter[StepItem] = TypeAdapter(StepItem)
STEP_ITEMS_ADAPTER: TypeAdapter[list[StepItem]] = TypeAdapter(list[StepItem])


def cut(text: str) -> str:
    """`text` within an item's cap, saying so when it was cut."""
    if len(text) <= MAX_ITEM_TEXT:
        return text
    marker = f"\n[cut: {len(text) - MAX_ITEM_TEXT + 64} more characters are not kept]"
    return text[: MAX_ITEM_TEXT - len(marker)] + marker


def steps_of(items: list[StepItem]) -> int:
    """How many model steps `items` hold (replies to a turn or a wrap-up: what `steps` counts)."""
    return sum(1 for item in items if isinstance(item, ReplyItem) and item.purpose != "compact")


def usage_of(items: list[StepItem]) -> RunUsage:
    """What the model calls and tool calls in `items` spent, as their replies reported it."""
    replies = [item for item in items if isinstance(item, ReplyItem)]
    return RunUsage(
        tokens_in=sum(r.tokens_in or 0 for r in replies),
        tokens_out=sum(r.tokens_out or 0 for r in replies),
        steps=steps_of(items),
        model_calls=len(replies),
        tool_calls=sum(1 for item in items if isinstance(item, ResultItem)),
    )


def replayable(items: list[StepItem]) -> list[StepItem]:
    """The items a resumed run replays, in order: every rewind cuts what came before it to its
    first `to` items; the supervisor's `spawned` marker is not the loop's."""
    kept: list[StepItem] = []
    for item in items:
        if isinstance(item, RewindItem):
            del kept[item.to :]
        elif not isinstance(item, SpawnedItem):
            kept.append(item)
    return kept


def approx_bytes(item: StepItem) -> int:
    """About how many bytes `item` takes in a frame (its text fields; JSON escaping aside)."""
    if isinstance(item, ReplyItem):
        calls = sum(len(c.raw_arguments) + len(c.name) + 64 for c in item.tool_calls)
        return len(item.text) + len(item.refusal or "") + calls + 256
    if isinstance(item, ResultItem):
        return len(item.text) + 128
    return 128


def first_steps(items: list[StepItem], steps: int) -> list[StepItem]:
    """The replayable items of a run's first `steps` model steps, each with its tool calls and
    their results: what a fork from step `steps` replays (`agentd fork`)."""
    kept: list[StepItem] = []
    seen = 0
    for item in replayable(items):
        if isinstance(item, ReplyItem) and item.purpose != "compact":
            if seen == steps:
                break
            seen += 1
        kept.append(item)
    return kept
