"""A run's transcript, both ways (docs/durability.md): `StepRecorder` hands each new step to the
supervisor and waits until it is journaled; `Replay` feeds a resumed run the steps its earlier
runs journaled, in order, in place of the model calls and tool calls they stand for.

The loop itself is unchanged by either: replaying the same model replies and tool results into
the pure machine rebuilds the same state (budgets, repeats, compaction, partial result), and the
run goes on live from the end of the journal. A call that was in flight when the earlier run
stopped (a `start` with no `result`) is the caller's to decide: run again, or reported as
interrupted.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Literal, Protocol

from pydantic import JsonValue

from protocol.transcript import (
    MAX_ITEMS_PER_RECORD,
    CallItem,
    OverflowItem,
    ReplyItem,
    ResultItem,
    RewindItem,
    StartItem,
    StepItem,
    ToolsRejectedItem,
    approx_bytes,
    cut,
    replayable,
)
from subagent.errors import StepNotRecorded
from subagent.messages import ModelReply, TokenUsage, ToolCall, ToolOutcome

# What the model is told of a call that was running when its run stopped and may not run twice.
INTERRUPTED = (
    "interrupted: this call was running when the task was stopped, and its outcome is unknown "
    "(it may or may not have taken effect). Check before calling it again."
)
# One `sup/record` frame carries items of about this many bytes at most (the frame cap is 16 MiB;
# JSON escaping can grow text several times).
RECORD_BYTES = 2_000_000
# A record is answered once the supervisor's journal committed it; a journal stalled longer
# reports itself unavailable first.
RECORD_TIMEOUT_S = 60.0

InFlight = Literal["in_flight"]
IN_FLIGHT: InFlight = "in_flight"
ModelOutcome = ReplyItem | OverflowItem | ToolsRejectedItem


# ---- conversions ------------------------------------------------------------------------------


def reply_item(reply: ModelReply, purpose: Literal["turn", "compact", "wrap_up"]) -> ReplyItem:
    usage = reply.usage
    return ReplyItem(
        purpose=purpose,
        text=cut(reply.text),
        tool_calls=[
            CallItem(
                id=c.id,
                name=c.name,
                arguments=c.arguments,
                arguments_error=c.arguments_error[:2000] if c.arguments_error else None,
                raw_arguments=cut(c.raw_arguments),
            )
            for c in reply.tool_calls
        ],
        refusal=cut(reply.refusal) if reply.refusal is not None else None,
        malformed=reply.malformed[:10_000] if reply.malformed is not None else None,
        unparsed_tool_call=reply.unparsed_tool_call,
        finish_reason=reply.finish_reason[:64] if reply.finish_reason else None,
        model=reply.model[:256],
        tokens_in=usage.tokens_in if usage is not None else None,
        tokens_out=usage.tokens_out if usage is not None else None,
    )


def model_reply(item: ReplyItem) -> ModelReply:
    """The reply a journaled item stands for, as the loop first saw it."""
    usage = None
    if item.tokens_in is not None and item.tokens_out is not None:
        usage = TokenUsage(item.tokens_in, item.tokens_out)
    calls = tuple(
        ToolCall(
            id=c.id,
            name=c.name,
            arguments=dict(c.arguments) if c.arguments is not None else None,
            arguments_error=c.arguments_error,
            raw_arguments=c.raw_arguments,
        )
        for c in item.tool_calls
    )
    return ModelReply(
        text=item.text,
        tool_calls=calls,
        refusal=item.refusal,
        usage=usage,
        finish_reason=item.finish_reason,
        model=item.model,
        malformed=item.malformed,
        unparsed_tool_call=item.unparsed_tool_call,
    )


def result_item(call: ToolCall, outcome: ToolOutcome) -> ResultItem:
    return ResultItem(call_id=call.id, name=call.name, text=cut(outcome.text), is_error=outcome.is_error)


def tool_outcome(item: ResultItem) -> ToolOutcome:
    return ToolOutcome(item.text, is_error=item.is_error)


# ---- replay -------------------------------------------------------------------------------------


class Replay:
    """A cursor over the journaled items of a resumed run. Each model call and tool call the loop
    makes takes the next item when it fits; the first that does not ends the replay (`diverged`
    says why) and the run goes live from there."""

    def __init__(self, items: Sequence[StepItem]) -> None:
        self._items = replayable(list(items))
        self._at = 0
        self.diverged: str | None = None
        # Model steps replayed (replies to a turn or a wrap-up), for the resume event.
        self.steps = 0
        # The journal's turn-purpose model calls (a scripted model goes on after them).
        self.turns = sum(
            1
            for item in self._items
            if (isinstance(item, ReplyItem | OverflowItem) and item.purpose == "turn")
            or isinstance(item, ToolsRejectedItem)
        )

    @property
    def active(self) -> bool:
        return self.diverged is None and self._at < len(self._items)

    @property
    def resumed(self) -> bool:
        """Whether this run goes on from a journal (it had items to replay)."""
        return bool(self._items)

    @property
    def position(self) -> int:
        """How many of the replayable items have been consumed."""
        return self._at

    def model_outcome(self, purpose: str) -> ModelOutcome | None:
        """The journaled outcome of the model call the loop makes now, or None (go live)."""
        if not self.active:
            return None
        item = self._items[self._at]
        fits = (isinstance(item, ReplyItem | OverflowItem) and item.purpose == purpose) or (
            isinstance(item, ToolsRejectedItem) and purpose == "turn"
        )
        if not fits:
            self._diverge(f"the loop asked the model ({purpose}) where the journal has a {item.kind}")
            return None
        self._at += 1
        if isinstance(item, ReplyItem) and item.purpose != "compact":
            self.steps += 1
        assert isinstance(item, ReplyItem | OverflowItem | ToolsRejectedItem)
        return item

    def tool_outcome(self, call: ToolCall) -> ResultItem | InFlight | None:
        """The journaled outcome of `call`: its result (it ran, or was refused before it
        started); `IN_FLIGHT` when it had started and has no result (its run stopped during it);
        None when the journal has nothing of it (go live)."""
        if not self.active:
            return None
        item = self._items[self._at]
        if isinstance(item, ResultItem) and item.call_id == call.id and item.name == call.name:
            self._at += 1
            return item
        if not (isinstance(item, StartItem) and item.call_id == call.id and item.name == call.name):
            self._diverge(f"the loop ran {call.name} where the journal has a {item.kind}")
            return None
        self._at += 1
        following = self._items[self._at] if self._at < len(self._items) else None
        if isinstance(following, ResultItem) and following.call_id == call.id:
            self._at += 1
            return following
        return IN_FLIGHT

    def _diverge(self, why: str) -> None:
        self.diverged = why

    def rewind(self) -> RewindItem:
        """The item that voids what was not replayed (to journal once the replay diverged)."""
        return RewindItem(to=self._at, why=(self.diverged or "")[:500])


# ---- recording ----------------------------------------------------------------------------------


class Link(Protocol):
    """`ControlChannel.request`'s shape: one `sup/*` request, answered or raising."""

    async def __call__(self, method: str, params: dict[str, JsonValue], *, timeout_s: float) -> JsonValue: ...


class StepRecorder:
    """Buffers a run's new items and hands them to the supervisor on `flush`, waiting until they
    are journaled. `link` sends one `sup/record` request (the control channel's `request`); None
    records nothing (a warm session's turns are not resumable)."""

    def __init__(self, link: Link | None) -> None:
        self._link = link
        self._buffer: list[StepItem] = []

    def later(self, item: StepItem) -> None:
        """Journal `item` with the next flush."""
        if self._link is not None:
            self._buffer.append(item)

    async def flush(self, *items: StepItem) -> None:
        """Journal what is buffered and `items`; return once committed.

        Raises:
            StepNotRecorded: the supervisor refused it or did not answer in time.
        """
        if self._link is None:
            return
        self._buffer.extend(items)
        while self._buffer:
            size, count = 0, 0
            for item in self._buffer[:MAX_ITEMS_PER_RECORD]:
                size += approx_bytes(item)
                if count and size > RECORD_BYTES:
                    break
                count += 1
            chunk = self._buffer[:count]
            params: dict[str, JsonValue] = {"items": [item.model_dump(mode="json") for item in chunk]}
            try:
                answer = await self._link("sup/record", params, timeout_s=RECORD_TIMEOUT_S)
            except (TimeoutError, ConnectionError, RuntimeError) as exc:
                raise StepNotRecorded(f"the step was not journaled: {exc or type(exc).__name__}") from exc
            if isinstance(answer, dict) and "refused" in answer:
                raise StepNotRecorded(f"the step was not journaled: {answer['refused']}")
            del self._buffer[:count]
