"""A fake model server: real HTTP/1.1 on 127.0.0.1 that plays queued behaviours.

It runs its own event loop in a background thread, so in-process tests and subagent processes
alike can point an endpoint's `base_url` at it. A test queues behaviours (a JSON reply, an SSE
stream that may stall, an error, a request left hanging), then inspects the recorded requests
and waits — bounded, on a condition variable, never by sleeping — for requests to arrive or for
a client to abort a response it was still receiving.
"""

from __future__ import annotations

import contextlib
import json
import threading
import time
from collections import deque
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import Future
from dataclasses import dataclass, field
from functools import partial
from types import TracebackType

import anyio
import anyio.from_thread
import anyio.to_thread
from anyio.abc import SocketStream
from anyio.streams.buffered import BufferedByteReceiveStream
from pydantic import JsonValue

MAX_HEAD_BYTES = 64 * 1024


@dataclass(frozen=True)
class Reply:
    """A complete response: status, headers and body, sent `delay_s` after the request (a slow model)."""

    status: int = 200
    body: bytes = b""
    headers: Mapping[str, str] = field(default_factory=dict)
    delay_s: float = 0.0


@dataclass(frozen=True)
class Stream:
    """An SSE response: each chunk is one `data:` event, `delay_s` before each.

    `stall=True` sends the chunks, then nothing until the client goes away.
    """

    chunks: Sequence[bytes]
    delay_s: float = 0.0
    stall: bool = False


@dataclass(frozen=True)
class Hang:
    """Accept the request and never answer; the connection stays open until the client leaves."""


@dataclass(frozen=True)
class Stall:
    """Send the status line, the headers and the first `sent_bytes` of `reply`'s body, then nothing
    until the client goes away (a server that wedged mid-reply)."""

    reply: Reply
    sent_bytes: int


def stall_midway(reply: Reply) -> Stall:
    """`reply`, stalled after half of its body."""
    return Stall(reply, len(reply.body) // 2)


Behaviour = Reply | Stream | Hang | Stall


@dataclass(frozen=True)
class Respond:
    """Choose the behaviour from the request itself (concurrent clients, no queue order)."""

    choose: Callable[[Recorded], Behaviour]


@dataclass(frozen=True)
class Recorded:
    method: str
    path: str
    headers: dict[str, str]
    body: bytes
    json: JsonValue
    at: float


def json_reply(body: JsonValue, status: int = 200, headers: Mapping[str, str] | None = None) -> Reply:
    return Reply(status, json.dumps(body).encode(), {"content-type": "application/json", **(headers or {})})


def tool_call(name: str, arguments: JsonValue, call_id: str | None = "call_1") -> dict[str, JsonValue]:
    """An OpenAI tool call; `arguments` that is a string is sent verbatim (to test bad JSON)."""
    raw = arguments if isinstance(arguments, str) else json.dumps(arguments)
    call: dict[str, JsonValue] = {"type": "function", "function": {"name": name, "arguments": raw}}
    if call_id is not None:
        call["id"] = call_id
    return call


def chat(
    text: str | None = "",
    *,
    tool_calls: Sequence[dict[str, JsonValue]] = (),
    refusal: str | None = None,
    finish_reason: str | None = None,
    usage: tuple[int, int] | None = (10, 5),
    model: str = "fake-model",
) -> Reply:
    """An OpenAI chat-completion reply."""
    message: dict[str, JsonValue] = {"role": "assistant", "content": text, "refusal": refusal}
    if tool_calls:
        message["tool_calls"] = list(tool_calls)
    finish = finish_reason or ("tool_calls" if tool_calls else "stop")
    body: dict[str, JsonValue] = {
        "id": "chatcmpl-fake",
        "object": "chat.completion",
        "model": model,
        "choices": [{"index": 0, "message": message, "finish_reason": finish}],
    }
    if usage is not None:
        body["usage"] = {"prompt_tokens": usage[0], "completion_tokens": usage[1]}
    return json_reply(body)


def anthropic(
    text: str = "",
    *,
    tool_uses: Sequence[tuple[str, str, JsonValue]] = (),
    stop_reason: str = "end_turn",
    usage: tuple[int, int] | None = (10, 5),
) -> Reply:
    """An Anthropic Messages reply; `tool_uses` are `(id, name, input)`."""
    content: list[JsonValue] = [{"type": "text", "text": text}] if text else []
    content += [{"type": "tool_use", "id": i, "name": n, "input": a} for i, n, a in tool_uses]
    body: dict[str, JsonValue] = {
        "id": "msg_fake",
        "type": "message",
        "role": "assistant",
        "model": "fake-claude",
        "content": content,
        "stop_reason": "tool_use" if tool_uses and stop_reason == "end_turn" else stop_reason,
    }
    if usage is not None:
        body["usage"] = {"input_tokens": usage[0], "output_tokens": usage[1]}
    return json_reply(body)


def error(status: int, body: JsonValue = None, headers: Mapping[str, str] | None = None) -> Reply:
    return json_reply(body if body is not None else {"error": {"message": "fake error"}}, status, headers)


def sse(
    events: Sequence[JsonValue], *, done: bool = True, delay_s: float = 0.0, stall: bool = False
) -> Stream:
    """An SSE stream of JSON events, ending with `[DONE]` when `done`."""
    chunks = [json.dumps(e).encode() for e in events] + ([b"[DONE]"] if done else [])
    return Stream(chunks, delay_s=delay_s, stall=stall)


def chat_chunks(
    text: str = "",
    *,
    tool_calls: Sequence[tuple[str, str, str]] = (),
    finish_reason: str | None = "stop",
    usage: tuple[int, int] | None = (10, 5),
) -> list[JsonValue]:
    """Chat-completion stream chunks: text in 3-char deltas, each `(id, name, arguments)` tool
    call split into a header delta and two argument fragments, then finish and usage chunks."""
    deltas: list[JsonValue] = [
        {"role": "assistant", "content": text[i : i + 3]} for i in range(0, len(text), 3)
    ]
    for index, (call_id, name, arguments) in enumerate(tool_calls):
        half = len(arguments) // 2
        head: dict[str, JsonValue] = {
            "index": index,
            "id": call_id,
            "type": "function",
            "function": {"name": name, "arguments": ""},
        }
        deltas.append({"tool_calls": [head]})
        for piece in (arguments[:half], arguments[half:]):
            deltas.append({"tool_calls": [{"index": index, "function": {"arguments": piece}}]})
    chunks: list[JsonValue] = [{"model": "fake-model", "choices": [{"index": 0, "delta": d}]} for d in deltas]
    if finish_reason is not None:
        chunks.append({"choices": [{"index": 0, "delta": {}, "finish_reason": finish_reason}]})
    if usage is not None:
        chunks.append({"choices": [], "usage": {"prompt_tokens": usage[0], "completion_tokens": usage[1]}})
    return chunks


@dataclass(frozen=True)
class ProviderLimits:
    """Limits the server enforces as a provider would: a request over `max_in_flight` requests
    being answered, or over `per_minute` admitted in the last 60 s, is answered 429 with
    `Retry-After: retry_after` (and counted in `FakeLLM.rejected`)."""

    max_in_flight: int | None = None
    per_minute: int | None = None
    retry_after: str = "1"


class FakeLLM:
    """The server. Use as a context manager; `base_url` is `http://127.0.0.1:<port>/v1`."""

    def __init__(
        self, default: Behaviour | Respond | None = None, *, limits: ProviderLimits | None = None
    ) -> None:
        self.default: Behaviour | Respond = default or chat("done")
        self.limits = limits
        self._in_flight = 0
        self._admitted: deque[float] = deque()
        self._rejected = 0
        self._queue: deque[Behaviour] = deque()
        self._requests: list[Recorded] = []
        self._aborted = 0
        self._connections = 0
        self._changed = threading.Condition()
        self._exit = contextlib.ExitStack()
        self._scope: anyio.CancelScope | None = None
        self._serving: Future[None] | None = None
        self.port = 0

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.port}/v1"

    def enqueue(self, *behaviours: Behaviour) -> None:
        """Behaviours for the next requests, in order; then `default` answers."""
        with self._changed:
            self._queue.extend(behaviours)

    @property
    def requests(self) -> list[Recorded]:
        with self._changed:
            return list(self._requests)

    @property
    def aborted(self) -> int:
        """Responses the client abandoned before they were complete (disconnected mid-way)."""
        with self._changed:
            return self._aborted

    @property
    def rejected(self) -> int:
        """Requests answered 429 for going over `limits`."""
        with self._changed:
            return self._rejected

    @property
    def connections(self) -> int:
        """TCP connections accepted so far (keep-alive reuse keeps this low)."""
        with self._changed:
            return self._connections

    def wait_requests_blocking(self, count: int, timeout_s: float = 5.0) -> list[Recorded]:
        """Block until `count` requests have arrived; AssertionError after `timeout_s`."""
        self._wait_for(lambda: len(self._requests) >= count, timeout_s, f"{count} requests")
        return self.requests

    def wait_aborted_blocking(self, count: int = 1, timeout_s: float = 5.0) -> None:
        self._wait_for(lambda: self._aborted >= count, timeout_s, f"{count} aborted responses")

    async def wait_requests(self, count: int, timeout_s: float = 5.0) -> list[Recorded]:
        """`wait_requests_blocking` without blocking the caller's event loop."""
        return await anyio.to_thread.run_sync(partial(self.wait_requests_blocking, count, timeout_s))

    async def wait_aborted(self, count: int = 1, timeout_s: float = 5.0) -> None:
        await anyio.to_thread.run_sync(partial(self.wait_aborted_blocking, count, timeout_s))

    def _wait_for(self, predicate: Callable[[], bool], timeout_s: float, what: str) -> None:
        with self._changed:
            if not self._changed.wait_for(predicate, timeout_s):
                raise AssertionError(f"fake LLM: timed out after {timeout_s}s waiting for {what}")

    def __enter__(self) -> FakeLLM:
        portal = self._exit.enter_context(anyio.from_thread.start_blocking_portal(name="fake-llm"))
        self._serving, self.port = portal.start_task(self._serve)
        self._exit.callback(portal.call, self._stop)
        return self

    def __exit__(
        self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self._exit.close()

    def _stop(self) -> None:
        if self._scope is not None:
            self._scope.cancel()

    async def _serve(self, *, task_status: anyio.abc.TaskStatus[int]) -> None:
        with anyio.CancelScope() as self._scope:
            listener = await anyio.create_tcp_listener(local_host="127.0.0.1", local_port=0)
            async with listener, anyio.create_task_group() as tg:
                task_status.started(listener.extra(anyio.abc.SocketAttribute.local_port))
                await listener.serve(self._connection, task_group=tg)

    async def _connection(self, stream: SocketStream) -> None:
        with self._changed:
            self._connections += 1
        reader = BufferedByteReceiveStream(stream)
        try:
            while True:
                request = await self._read_request(reader)
                if request is None:
                    return
                behaviour, admitted = self._record(request)
                try:
                    if not await self._respond(stream, reader, behaviour):
                        return
                finally:
                    if admitted:
                        with self._changed:
                            self._in_flight -= 1
        except (anyio.EndOfStream, anyio.IncompleteRead, anyio.BrokenResourceError, OSError):
            return
        finally:
            with anyio.CancelScope(shield=True):
                await stream.aclose()

    async def _read_request(self, reader: BufferedByteReceiveStream) -> Recorded | None:
        try:
            head = await reader.receive_until(b"\r\n\r\n", MAX_HEAD_BYTES)
        except anyio.IncompleteRead:
            return None  # the client closed an idle keep-alive connection
        request_line, *header_lines = head.decode("latin-1").split("\r\n")
        method, path, _version = request_line.split(" ", 2)
        headers = {k.strip().lower(): v.strip() for k, _, v in (h.partition(":") for h in header_lines if h)}
        body = await reader.receive_exactly(int(headers.get("content-length", "0")))
        try:
            parsed: JsonValue = json.loads(body) if body else None
        except ValueError:
            parsed = None
        return Recorded(method, path, headers, body, parsed, time.monotonic())

    def _record(self, request: Recorded) -> tuple[Behaviour, bool]:
        """The behaviour for `request`, and whether it was admitted under `limits`."""
        with self._changed:
            self._requests.append(request)
            self._changed.notify_all()
            if self._over_limits(request.at):
                self._rejected += 1
                assert self.limits is not None
                return error(429, headers={"retry-after": self.limits.retry_after}), False
            self._in_flight += 1
            self._admitted.append(request.at)
            behaviour = self._queue.popleft() if self._queue else self.default
        return (behaviour.choose(request) if isinstance(behaviour, Respond) else behaviour), True

    def _over_limits(self, now: float) -> bool:
        limits = self.limits
        if limits is None:
            return False
        while self._admitted and self._admitted[0] <= now - 60.0:
            self._admitted.popleft()
        if limits.max_in_flight is not None and self._in_flight >= limits.max_in_flight:
            return True
        return limits.per_minute is not None and len(self._admitted) >= limits.per_minute

    async def _respond(
        self, stream: SocketStream, reader: BufferedByteReceiveStream, behaviour: Behaviour
    ) -> bool:
        """Play `behaviour`; False when the connection must close (the client left, or a stall)."""
        finished = False

        async def play() -> None:
            nonlocal finished
            with contextlib.suppress(anyio.BrokenResourceError, anyio.ClosedResourceError, OSError):
                await self._play(stream, behaviour)
                finished = True
            tg.cancel_scope.cancel()

        async def watch_disconnect() -> None:
            # A client does not send while a response is in flight, but if it pipelines the
            # next request early, those bytes go back into the reader rather than being lost.
            with contextlib.suppress(anyio.EndOfStream, anyio.BrokenResourceError, OSError):
                while True:
                    reader.feed_data(await stream.receive())
            tg.cancel_scope.cancel()

        async with anyio.create_task_group() as tg:
            tg.start_soon(play)
            tg.start_soon(watch_disconnect)
        if not finished:
            with self._changed:
                self._aborted += 1
                self._changed.notify_all()
        return finished

    async def _play(self, stream: SocketStream, behaviour: Behaviour) -> None:
        if isinstance(behaviour, Hang):
            await anyio.sleep_forever()
        if isinstance(behaviour, Stall):
            reply = behaviour.reply
            headers = {"content-length": str(len(reply.body)), **reply.headers}
            await stream.send(_head(reply.status, headers) + reply.body[: behaviour.sent_bytes])
            await anyio.sleep_forever()
        if isinstance(behaviour, Reply):
            if behaviour.delay_s:
                await anyio.sleep(behaviour.delay_s)
            headers = {"content-length": str(len(behaviour.body)), **behaviour.headers}
            await stream.send(_head(behaviour.status, headers) + behaviour.body)
            return
        assert isinstance(behaviour, Stream)
        await stream.send(_head(200, {"content-type": "text/event-stream", "transfer-encoding": "chunked"}))
        for chunk in behaviour.chunks:
            if behaviour.delay_s:
                await anyio.sleep(behaviour.delay_s)
            event = b"data: " + chunk + b"\n\n"
            await stream.send(b"%x\r\n%s\r\n" % (len(event), event))
        if behaviour.stall:
            await anyio.sleep_forever()
        await stream.send(b"0\r\n\r\n")


def _head(status: int, headers: Mapping[str, str]) -> bytes:
    lines = [f"HTTP/1.1 {status} Fake", *(f"{k}: {v}" for k, v in headers.items()), "", ""]
    return "\r\n".join(lines).encode("latin-1")
