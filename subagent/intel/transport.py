"""HTTP exchanges with a model endpoint: the only intel module that touches the network.

Every wait is bounded by a named anyio deadline (request, first token, stream idle) and every
body read is size-capped. `httpx2` exceptions are translated here, once, into the intel error
tree; a non-2xx reply is classified by `classify`. Leaving a `client.stream` block — by return,
error or cancellation — closes the response, which aborts an unfinished request or stream.
"""

from __future__ import annotations

import functools
import re
import ssl
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

import anyio
import httpx2

from subagent.errors import IntelError, IntelStalled, IntelTransient
from subagent.intel.classify import EndpointFatal, classify_status
from subagent.intel.rate_headers import catch
from subagent.intel.reply_body import (
    MAX_BODY_BYTES,
    MAX_ERROR_BODY_BYTES,
    BodyCap,
    Received,
    is_json_content_type,
)
from subagent.intel.retry import parse_retry_after, parse_retry_after_ms
from subagent.intel.sse import SseError, SseEvent, SseParser

DRAIN_TIMEOUT_S = 0.5
_HEADER_NAME = re.compile(r"[!#$%&'*+.^_`|~0-9A-Za-z-]+")


@dataclass(frozen=True, slots=True)
class Streamed:
    """How a 2xx event stream ended: `problem` describes a stream we stopped trusting;
    `plain` is set when the server ignored `stream` and answered with a JSON body instead."""

    status: int
    problem: str | None = None
    plain: Received | None = None


def checked_headers(headers: Mapping[str, str]) -> dict[str, str]:
    """`headers`, if every name and value can go on the wire; else a config `IntelFatal`
    naming the header (never its value, which may be a key)."""
    for name, value in headers.items():
        if not _HEADER_NAME.fullmatch(name):
            raise EndpointFatal(f"header name {name[:64]!r} is not a valid HTTP token", kind="config")
        if not all(c == "\t" or " " <= c <= "~" for c in value):
            raise EndpointFatal(
                f"the value of header {name!r} is not printable ASCII on one line", kind="config"
            )
    return dict(headers)


@functools.cache
def tls_context() -> ssl.SSLContext:
    """The default verifying TLS context, built once per process (loading the CA bundle costs
    ~50 ms); the zygote builds it before forking, so every subagent starts with it."""
    return ssl.create_default_context()


# httpcore's `trace` extension names this step when a request's body has been written to the socket.
_BODY_SENT = frozenset({"http11.send_request_body.complete", "http2.send_request_body.complete"})


def open_client(on_sent: Callable[[], None] | None = None) -> httpx2.AsyncClient:
    """One pooled client for all endpoints. Timeouts are ours (anyio deadlines), not httpx's.

    `on_sent` is called each time a request's body is on the wire (before its reply): the run
    starts work that would compete with sending the first request only after it (docs/triggers.md).
    """

    async def rate_limits(response: httpx2.Response) -> None:
        catch(response.headers.items())

    hooks: dict[str, list[Callable[..., Any]]] = {"response": [rate_limits]}
    if on_sent is not None:

        async def trace(event: str, _info: dict[str, Any]) -> None:
            if event in _BODY_SENT:
                on_sent()

        async def traced(request: httpx2.Request) -> None:
            request.extensions = {**request.extensions, "trace": trace}

        hooks["request"] = [traced]
    return httpx2.AsyncClient(timeout=None, follow_redirects=False, verify=tls_context(), event_hooks=hooks)


async def post_json(
    client: httpx2.AsyncClient,
    url: str,
    headers: Mapping[str, str],
    body: bytes,
    *,
    timeout_s: float,
    idle_timeout_s: float,
    constrained: bool = False,
) -> Received:
    """POST `body` and read the whole reply; a non-2xx reply raises.

    The exchange must end within `timeout_s`; once the response has begun (its headers came),
    no silence between body chunks may exceed `idle_timeout_s`. Either bound raises
    `IntelStalled`: a server that sends half a body and stops is cut off at the idle bound,
    not the (much longer) total one. `constrained`: the body asks for a response schema, so an
    error naming it is the server refusing that (`ConstraintRejected`).
    """
    with anyio.move_on_after(timeout_s):
        try:
            async with client.stream("POST", url, content=body, headers=dict(headers)) as response:
                with anyio.CancelScope(deadline=anyio.current_time() + idle_timeout_s) as idle:
                    await _raise_for_status(response, idle, idle_timeout_s, constrained)
                    return await _read_body(response, idle, idle_timeout_s)
        except httpx2.HTTPError as exc:
            raise translate_http_error(exc) from exc
        except httpx2.InvalidURL as exc:
            raise EndpointFatal("the endpoint base_url is not a valid URL", kind="config") from exc
        raise IntelStalled(f"the reply stalled: no data for read_idle_timeout_s={idle_timeout_s:g}")
    raise IntelStalled(f"no reply within request_timeout_s={timeout_s:g}")


async def post_sse(
    client: httpx2.AsyncClient,
    url: str,
    headers: Mapping[str, str],
    body: bytes,
    *,
    first_token_timeout_s: float,
    idle_timeout_s: float,
    on_event: Callable[[SseEvent], bool],
    constrained: bool = False,
) -> Streamed:
    """POST `body` and feed each server-sent event to `on_event` until it returns True or EOF.

    The first event must arrive within `first_token_timeout_s` of sending; after that, no gap
    between events may exceed `idle_timeout_s`. Either stall raises `IntelStalled`.
    """
    events_seen = 0
    done = False
    status = 0
    with anyio.CancelScope(deadline=anyio.current_time() + first_token_timeout_s) as scope:
        try:
            async with client.stream("POST", url, content=body, headers=dict(headers)) as response:
                await _raise_for_status(response, scope, idle_timeout_s, constrained)
                status = response.status_code
                if is_json_content_type(response.headers.get("content-type", "")):
                    scope.deadline = anyio.current_time() + idle_timeout_s
                    return Streamed(status, plain=await _read_body(response, scope, idle_timeout_s))
                parser = SseParser()
                cap = BodyCap(MAX_BODY_BYTES)
                async for chunk in response.aiter_bytes():
                    within_cap = cap.take(chunk)
                    if done:
                        # Past the last event: read the chunked terminator (bounded) so the
                        # connection returns to the pool; a reconnect per turn costs a TCP (and
                        # in production a TLS) handshake every model call.
                        if not within_cap:
                            break
                        continue
                    if not within_cap:
                        return Streamed(response.status_code, f"stream exceeds {MAX_BODY_BYTES} bytes")
                    try:
                        events = parser.feed(chunk)
                    except SseError as exc:
                        return Streamed(response.status_code, str(exc))
                    for event in events:
                        events_seen += 1
                        scope.deadline = anyio.current_time() + idle_timeout_s
                        if on_event(event):
                            done = True
                            scope.deadline = anyio.current_time() + DRAIN_TIMEOUT_S
                            break
                return Streamed(response.status_code)
        except httpx2.HTTPError as exc:
            if done:
                return Streamed(status)
            raise translate_http_error(exc) from exc
        except httpx2.InvalidURL as exc:
            raise EndpointFatal("the endpoint base_url is not a valid URL", kind="config") from exc
    if done:
        return Streamed(status)  # complete; only the drain ran out of time (the connection closes)
    if events_seen == 0:
        raise IntelStalled(
            f"stream stalled: no first event within first_token_timeout_s={first_token_timeout_s:g}"
        )
    raise IntelStalled(f"stream stalled: no event for stream_idle_timeout_s={idle_timeout_s:g}")


async def _read_body(response: httpx2.Response, idle: anyio.CancelScope, idle_timeout_s: float) -> Received:
    """The body, capped; every chunk pushes the `idle` scope's deadline `idle_timeout_s` further."""
    cap = BodyCap(MAX_BODY_BYTES, keep_bytes=MAX_BODY_BYTES)
    async for chunk in response.aiter_bytes():
        idle.deadline = anyio.current_time() + idle_timeout_s
        if not cap.take(chunk):
            return Received(response.status_code, b"", oversized=True)
    return Received(response.status_code, cap.head)


async def _raise_for_status(
    response: httpx2.Response, idle: anyio.CancelScope, idle_timeout_s: float, constrained: bool
) -> None:
    status = response.status_code
    if 200 <= status < 300:
        return
    # Only the head of an error body is read: enough for its code and message.
    body = BodyCap(MAX_ERROR_BODY_BYTES, keep_bytes=MAX_ERROR_BODY_BYTES)
    async for chunk in response.aiter_bytes():
        idle.deadline = anyio.current_time() + idle_timeout_s
        body.take(chunk)
        if body.head_full:
            break
    retry_after_s = parse_retry_after_ms(response.headers.get("retry-after-ms"))
    if retry_after_s is None:
        retry_after_s = parse_retry_after(response.headers.get("retry-after"), now_epoch_s=time.time())
    raise classify_status(status, body.head, retry_after_s=retry_after_s, constrained=constrained)


def translate_http_error(exc: httpx2.HTTPError) -> IntelError:
    """The intel error for an `httpx2` failure (the message names the class, not the URL)."""
    kind = type(exc).__name__
    if isinstance(exc, httpx2.UnsupportedProtocol):
        return EndpointFatal(f"the endpoint URL is unusable ({kind})", kind="config")
    if isinstance(exc, httpx2.LocalProtocolError):
        return EndpointFatal(f"the request could not be sent as HTTP ({kind})", kind="config")
    if isinstance(exc, httpx2.ConnectError | httpx2.ConnectTimeout):
        return IntelTransient(f"could not connect ({kind})")
    if isinstance(exc, httpx2.RemoteProtocolError):
        return IntelTransient(f"the server broke the connection ({kind})")
    if isinstance(exc, httpx2.TimeoutException):
        return IntelTransient(f"timed out ({kind})")
    # Network, protocol, proxy and decoding failures: the next attempt may well succeed.
    return IntelTransient(f"transport failure ({kind})")
