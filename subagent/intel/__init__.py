"""Model endpoints behind one call: `Intelligence.complete(request) -> ModelReply`.

`open_intelligence` builds the adapters for an ordered endpoint list (openai, anthropic,
scripted) and wraps them in retry + failover with circuit breakers. `complete` raises only
`IntelFatal`, `IntelUnavailable` or `ContextOverflow`; an unparsable reply is returned as
`ModelReply(malformed=...)`. It takes no deadline: cancel it with an anyio cancel scope, which
aborts the in-flight HTTP request or stream.
"""

from __future__ import annotations

import random
from collections.abc import AsyncIterator, Callable, Sequence
from contextlib import asynccontextmanager
from typing import Protocol

from protocol.spawn import EndpointSpec, LoopKnobs
from subagent.errors import IntelFatal
from subagent.intel.endpoint import Endpoint
from subagent.intel.failover import FailoverIntelligence
from subagent.intel.retry import RetryPolicy
from subagent.intel.scripted import ScriptedModel
from subagent.intel.slots import Slots
from subagent.messages import ModelReply, ModelRequest
from subagent.telemetry import EventSink

__all__ = ["Intelligence", "open_intelligence"]


class Intelligence(Protocol):
    async def complete(self, request: ModelRequest) -> ModelReply: ...


@asynccontextmanager
async def open_intelligence(
    endpoints: Sequence[EndpointSpec],
    knobs: LoopKnobs,
    *,
    sink: EventSink,
    capture_content: bool = False,
    on_sent: Callable[[], None] | None = None,
    turns_played: int = 0,
    slots: Slots | None = None,
) -> AsyncIterator[Intelligence]:
    """Open the endpoints (one pooled HTTP client shared by the HTTP ones) for the block's lifetime.
    `on_sent` is called whenever an HTTP request's body is on the wire (not for a scripted model).
    `turns_played`: a resumed run's turns replayed from its journal, which a scripted model counts
    as played (it goes on with the next turn of its script). `slots`: where a request to an
    endpoint with provider limits asks for a slot (the supervisor, over the control channel).

    Raises:
        IntelFatal: the list is empty, or a scripted endpoint's script is missing or invalid.
    """
    if not endpoints:
        raise IntelFatal("no intelligence endpoint is configured")
    scripted = {
        i: ScriptedModel.open(spec, turns_played=turns_played)
        for i, spec in enumerate(endpoints)
        if spec.kind == "scripted"
    }
    if len(scripted) == len(endpoints):
        # No HTTP endpoint: do not import or start the HTTP stack at all.
        yield _build(list(scripted.values()), knobs, sink, capture_content, slots)
        return
    from subagent.intel.anthropic import AnthropicMessages
    from subagent.intel.openai import OpenAIChat
    from subagent.intel.transport import open_client

    async with open_client(on_sent) as client:
        adapters: list[Endpoint] = []
        for i, spec in enumerate(endpoints):
            if spec.kind == "openai":
                adapters.append(OpenAIChat(spec, client))
            elif spec.kind == "anthropic":
                adapters.append(AnthropicMessages(spec, client))
            else:
                adapters.append(scripted[i])
        yield _build(adapters, knobs, sink, capture_content, slots)


def _build(
    adapters: list[Endpoint], knobs: LoopKnobs, sink: EventSink, capture: bool, slots: Slots | None
) -> FailoverIntelligence:
    return FailoverIntelligence(
        adapters,
        RetryPolicy.from_knobs(knobs),
        sink=sink,
        capture_content=capture,
        rng=random.Random(),
        slots=slots,
    )
