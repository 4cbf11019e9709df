"""Which tool-result images go into one model request (pure; docs/design.md §10's encode-once rule kept).

An endpoint that does not accept images gets none. One that does gets the newest images first,
up to `MAX_REQUEST_IMAGE_BYTES`; an older result whose images do not fit is sent as its text-only
twin (its text already describes each image). Twins are kept per original message, so a message
encodes to the same bytes on every request and the adapters' per-message caches stay warm.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace

from subagent.messages import Message, ToolResultMessage

MAX_REQUEST_IMAGE_BYTES = 8 * 1024 * 1024


class ImageSelection:
    """Per adapter: the request's messages, with images only where the endpoint and budget allow."""

    def __init__(self, *, enabled: bool, budget_bytes: int = MAX_REQUEST_IMAGE_BYTES) -> None:
        self._enabled = enabled
        self._budget = budget_bytes
        # id(original) -> (original, text-only twin); the original is held so its id stays unique.
        self._twins: dict[int, tuple[ToolResultMessage, ToolResultMessage]] = {}

    def select(self, messages: Sequence[Message]) -> tuple[Message, ...]:
        if not any(isinstance(m, ToolResultMessage) and m.images for m in messages):
            self._twins.clear()
            return tuple(messages)
        left = self._budget if self._enabled else 0
        out: list[Message] = list(messages)
        twins: dict[int, tuple[ToolResultMessage, ToolResultMessage]] = {}
        for index in range(len(out) - 1, -1, -1):
            message = out[index]
            if not isinstance(message, ToolResultMessage) or not message.images:
                continue
            size = sum(image.size_bytes for image in message.images)
            if size <= left:
                left -= size
                continue
            known = self._twins.get(id(message))
            twin = known[1] if known is not None and known[0] is message else replace(message, images=())
            twins[id(message)] = (message, twin)
            out[index] = twin
        self._twins = twins
        return tuple(out)
