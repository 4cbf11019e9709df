"""A loopback model for the zygote's warm-up: answers each HTTP request with one canned reply.

The zygote plays one task per model kind against it before its first fork, so that what the
HTTP path builds on first use (httpx2's and httpcore2's request machinery, h11's parser states,
the adapters' pydantic validators and encode caches, specialised bytecode) is built once in the
zygote's shared pages instead of in every forked child (docs/decisions.md). It serves in the
zygote's own event loop — the zygote must stay single-threaded — and only for that warm-up.
"""

from __future__ import annotations

import json

import anyio
from anyio.abc import Listener, SocketStream

MAX_REQUEST_BYTES = 1 << 20
READ_TIMEOUT_S = 5.0

OPENAI_REPLY = {
    "id": "chatcmpl-warm",
    "object": "chat.completion",
    "model": "warm",
    "choices": [{"index": 0, "message": {"role": "assistant", "content": "warm"}, "finish_reason": "stop"}],
    "usage": {"prompt_tokens": 1, "completion_tokens": 1},
}
ANTHROPIC_REPLY = {
    "id": "msg_warm",
    "type": "message",
    "role": "assistant",
    "model": "warm",
    "content": [{"type": "text", "text": "warm"}],
    "stop_reason": "end_turn",
    "usage": {"input_tokens": 1, "output_tokens": 1},
}


def reply_for(request_line: bytes) -> bytes:
    """The whole HTTP response for a request: an Anthropic message for `…/messages`, else an
    OpenAI chat completion."""
    parts = request_line.split(b" ")
    path = parts[1] if len(parts) > 1 else b""
    body = json.dumps(ANTHROPIC_REPLY if path.endswith(b"/messages") else OPENAI_REPLY).encode()
    head = (
        b"HTTP/1.1 200 OK\r\ncontent-type: application/json\r\n"
        b"content-length: %d\r\nconnection: close\r\n\r\n" % len(body)
    )
    return head + body


def content_length(head: bytes) -> int:
    for line in head.split(b"\r\n")[1:]:
        name, _, value = line.partition(b":")
        if name.strip().lower() == b"content-length":
            return int(value.strip())
    return 0


async def answer(stream: SocketStream) -> None:
    """Read one request (bounded in size and time), send the canned reply, close."""
    async with stream:
        data = b""
        with anyio.move_on_after(READ_TIMEOUT_S):
            while b"\r\n\r\n" not in data and len(data) < MAX_REQUEST_BYTES:
                data += await stream.receive()
            head, _, body = data.partition(b"\r\n\r\n")
            remaining = min(content_length(head), MAX_REQUEST_BYTES) - len(body)
            while remaining > 0:
                chunk = await stream.receive()
                remaining -= len(chunk)
            await stream.send(reply_for(head.split(b"\r\n", 1)[0]))


async def serve(listener: Listener[SocketStream]) -> None:
    """Answer connections until cancelled (the caller cancels once its warm-up runs are done)."""
    async with listener:
        await listener.serve(_answer_quietly)


async def _answer_quietly(stream: SocketStream) -> None:
    try:
        await answer(stream)
    except (anyio.BrokenResourceError, anyio.EndOfStream, anyio.ClosedResourceError, ValueError):
        pass  # the client went away or sent something odd: the warm-up run reports its own failure
