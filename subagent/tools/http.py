"""The streamable HTTP transport, with bounded retries for failures that never reached the server.

The SDK's `streamable_http_client` does the protocol; this module gives it an `httpx2` client
whose transport retries what is safe to repeat — a connect error, or a 429/503 that refused the
request — with the loop's backoff knobs (doubling, jittered, honouring `Retry-After`). When the
retries run out, or a failure may have reached the server (a reset mid-response: repeating a
non-idempotent call is not ours to decide), the request is answered with a synthetic JSON-RPC
error carrying `TRANSPORT_FAILED`, so the session reports it as that call's failure instead of
the transport task crashing. A request the server refused because it no longer knows the session
(it restarted) is answered with `SESSION_LOST`: the caller opens a new session and may resend.
"""

from __future__ import annotations

import json
import logging
import random
import time
from collections.abc import AsyncIterator, Callable
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from email.utils import parsedate_to_datetime

import anyio
import httpx2
from mcp.client._transport import TransportStreams  # the alias the public `mcp.client.Transport` is built on
from mcp.client.sse import sse_client
from mcp.client.streamable_http import streamable_http_client
from mcp.shared.auth import OAuthClientInformationFull, OAuthToken

from protocol.spawn import LoopKnobs, McpServerSpec
from subagent.tools.oauth_store import login_provider

logger = logging.getLogger(__name__)

# A JSON-RPC code in the implementation-defined range, minted locally and never sent on a wire.
TRANSPORT_FAILED = -32099
# Same range: the server no longer knows our session (it restarted, or expired it).
SESSION_LOST = -32098
SESSION_LOST_STATUS = frozenset({400, 404})
MCP_SESSION_ID = "mcp-session-id"
MAX_ERROR_BODY_BYTES = 64 * 1024
# Dropped when an error body is re-served from memory (it is already de-chunked and decoded).
_FRAMING_HEADERS = frozenset({"content-length", "transfer-encoding", "content-encoding"})
RETRYABLE_STATUS = frozenset({429, 503})
# Time the session's goodbye (`DELETE`) may take when the connection is retired.
CLOSE_TIMEOUT_S = 2.0
# Failures where the request provably never reached the server, so repeating it is harmless.
RETRYABLE_ERRORS: tuple[type[Exception], ...] = (
    httpx2.ConnectError,
    httpx2.ConnectTimeout,
    httpx2.PoolTimeout,
)


def backoff_delay_s(
    attempt: int, knobs: LoopKnobs, *, jitter: float, retry_after_s: float | None = None
) -> float:
    """Delay before retry number `attempt + 1` (pure).

    Doubles from `backoff_initial_s`, stretched by up to half again by `jitter` ∈ [0, 1), capped
    at `backoff_max_s`, and never shorter than the server's `Retry-After`.
    """
    base = knobs.backoff_initial_s * (2.0**attempt)
    delay = min(base * (1.0 + 0.5 * jitter), knobs.backoff_max_s)
    return max(delay, retry_after_s or 0.0)


def parse_retry_after(value: str | None, *, now_s: float) -> float | None:
    """`Retry-After` in seconds (delta-seconds or an HTTP date relative to `now_s`, a Unix time)."""
    if value is None:
        return None
    value = value.strip()
    if value.isdigit():
        return float(value)
    try:
        when = parsedate_to_datetime(value)
    except (TypeError, ValueError):
        return None
    return max(0.0, when.timestamp() - now_s)


def failure_response(
    request: httpx2.Request, reason: str, *, code: int = TRANSPORT_FAILED
) -> httpx2.Response:
    """A response the SDK turns into a JSON-RPC error for exactly this request (`id` is re-bound)."""
    body = {"jsonrpc": "2.0", "id": None, "error": {"code": code, "message": reason}}
    return httpx2.Response(503, json=body, request=request)


def session_lost(status: int, body: bytes) -> bool:
    """Whether a 400/404 answer to a request in a session says the session is unknown (pure).

    The spec's answer is 404; servers built on some SDKs answer 400 "No valid session ID". A
    JSON-RPC error in the body is believed as written (a 404 can also mean an unknown method).
    The request was refused before it ran, so it is safe to send again in a new session.
    """
    if status not in SESSION_LOST_STATUS:
        return False
    try:
        parsed = json.loads(body)
    except ValueError:
        parsed = None
    error = parsed.get("error") if isinstance(parsed, dict) else None
    if isinstance(error, dict) and isinstance(error.get("message"), str):
        return "session" in error["message"].lower()
    return status == 404 or b"session" in body.lower()


class RetryingTransport(httpx2.AsyncBaseTransport):
    """Retries requests that never reached the server; answers exhausted ones with `failure_response`."""

    def __init__(
        self,
        inner: httpx2.AsyncBaseTransport,
        knobs: LoopKnobs,
        *,
        jitter: Callable[[], float] = random.random,
        clock: Callable[[], float] | None = None,
    ) -> None:
        self._inner = inner
        self._knobs = knobs
        self._jitter = jitter
        self._clock = clock

    def _now(self) -> float:
        return self._clock() if self._clock is not None else time.time()

    async def handle_async_request(self, request: httpx2.Request) -> httpx2.Response:
        attempts = self._knobs.transport_retries + 1
        for attempt in range(attempts):
            retry_after_s: float | None = None
            try:
                response = await self._inner.handle_async_request(request)
            except RETRYABLE_ERRORS as exc:
                reason = f"{type(exc).__name__}: {exc}"
            except httpx2.TransportError as exc:
                return failure_response(
                    request, f"{type(exc).__name__}: {exc} (not retried: it may have been received)"
                )
            else:
                if (
                    request.method == "POST"
                    and response.status_code in SESSION_LOST_STATUS
                    and MCP_SESSION_ID in request.headers
                ):
                    return await self._check_session(request, response)
                if response.status_code not in RETRYABLE_STATUS:
                    return response
                retry_after_s = parse_retry_after(response.headers.get("retry-after"), now_s=self._now())
                await response.aclose()
                reason = f"HTTP {response.status_code}"
                if retry_after_s is not None and retry_after_s > self._knobs.backoff_max_s:
                    # Waiting that long would spend the caller's deadline on one request.
                    return failure_response(
                        request, f"{reason}; server asked to retry after {retry_after_s:g} s"
                    )
            if attempt + 1 < attempts:
                delay = backoff_delay_s(
                    attempt, self._knobs, jitter=self._jitter(), retry_after_s=retry_after_s
                )
                logger.info(
                    "MCP HTTP %s to %s failed (%s); retry in %.2f s",
                    request.method,
                    request.url,
                    reason,
                    delay,
                )
                await anyio.sleep(delay)
        return failure_response(request, f"{reason} after {attempts} attempts")

    async def _check_session(self, request: httpx2.Request, response: httpx2.Response) -> httpx2.Response:
        """A 400/404 to a request in a session: the server forgot the session, or refused this one."""
        body = bytearray()
        try:
            async for chunk in response.aiter_bytes():
                body += chunk
                if len(body) > MAX_ERROR_BODY_BYTES:
                    break
        except httpx2.HTTPError as exc:
            return failure_response(request, f"HTTP {response.status_code}, then {type(exc).__name__}: {exc}")
        finally:
            await response.aclose()
        if session_lost(response.status_code, bytes(body)):
            reason = f"the server does not know this session (HTTP {response.status_code})"
            return failure_response(request, reason, code=SESSION_LOST)
        headers = [(k, v) for k, v in response.headers.items() if k.lower() not in _FRAMING_HEADERS]
        return httpx2.Response(response.status_code, headers=headers, content=bytes(body), request=request)

    async def aclose(self) -> None:
        await self._inner.aclose()


class MemoryTokens:
    """The SDK's `TokenStorage`, in memory: one per server, so a reconnect reuses the token."""

    def __init__(self) -> None:
        self._tokens: OAuthToken | None = None
        self._client: OAuthClientInformationFull | None = None

    async def get_tokens(self) -> OAuthToken | None:
        return self._tokens

    async def set_tokens(self, tokens: OAuthToken) -> None:
        self._tokens = tokens

    async def get_client_info(self) -> OAuthClientInformationFull | None:
        return self._client

    async def set_client_info(self, client_info: OAuthClientInformationFull) -> None:
        self._client = client_info


def oauth_auth(spec: McpServerSpec) -> httpx2.Auth | None:
    """The SDK's OAuth provider for `spec` (discovery, token request, refresh), or None.

    Its token storage lives as long as the returned object: keep one per server. An
    `authorization_code` server gets the provider over its stored login instead.
    """
    if spec.oauth_login is not None:
        return login_provider(spec)
    oauth, url = spec.oauth, spec.url
    if oauth is None or url is None:
        return None
    # Imported here, not with the module: it pulls in PyJWT and most of `cryptography` (~2 MiB,
    # ~50 modules) that the zygote would hold and copy into every fork for the few tasks that
    # use OAuth client credentials. A task that does pays ~0.1 s of imports once.
    from mcp.client.auth.extensions.client_credentials import (
        ClientCredentialsOAuthProvider,
        PrivateKeyJWTOAuthProvider,
        SignedJWTParameters,
    )

    storage = MemoryTokens()
    if oauth.method == "private_key_jwt":
        assert oauth.private_key is not None  # guaranteed by OAuthSpec's validator
        signer = SignedJWTParameters(
            issuer=oauth.client_id,
            subject=oauth.client_id,
            signing_key=oauth.private_key.get_secret_value(),
            signing_algorithm=oauth.jwt_algorithm,
        )
        return PrivateKeyJWTOAuthProvider(
            url,
            storage,
            oauth.client_id,
            signer.create_assertion_provider(),
            scope=oauth.scope,
            issuer=oauth.issuer,
        )
    assert oauth.client_secret is not None  # guaranteed by OAuthSpec's validator
    return ClientCredentialsOAuthProvider(
        url,
        storage,
        oauth.client_id,
        oauth.client_secret.get_secret_value(),
        token_endpoint_auth_method=oauth.method,
        scope=oauth.scope,
        issuer=oauth.issuer,
    )


def http_client(
    spec: McpServerSpec,
    knobs: LoopKnobs,
    *,
    inner: httpx2.AsyncBaseTransport | None = None,
    auth: httpx2.Auth | None = None,
) -> httpx2.AsyncClient:
    """The `httpx2` client for one server: its headers (secrets revealed only here) and timeouts."""
    headers = {k: v.get_secret_value() for k, v in spec.headers.items()}
    # No read timeout: a tool call is bounded by the caller, and the server's notification
    # stream (GET) idles legitimately for as long as the connection lives.
    timeout = httpx2.Timeout(
        connect=spec.connect_timeout_s, read=None, write=spec.call_timeout_s, pool=spec.connect_timeout_s
    )
    transport = RetryingTransport(inner or httpx2.AsyncHTTPTransport(), knobs)
    return httpx2.AsyncClient(headers=headers, timeout=timeout, transport=transport, auth=auth)


@asynccontextmanager
async def shielded_close(
    opened: AbstractAsyncContextManager[TransportStreams], bound_s: float
) -> AsyncIterator[TransportStreams]:
    """Enter `opened`; run its exit shielded from the caller's cancellation but within `bound_s`.

    A session's goodbye (the streamable HTTP `DELETE`) is sent from the transport's exit, which
    usually runs because the caller's scope was cancelled: unshielded, the request would be
    cancelled before it left and the server would keep the session forever. The scope encloses
    the whole of `opened` (its task group's scope must nest inside it) and turns shielded only
    once the caller's body is done.
    """
    scope = anyio.CancelScope()
    with scope:
        async with opened as streams:
            try:
                yield streams
            finally:
                scope.shield = True
                scope.deadline = anyio.current_time() + bound_s


@asynccontextmanager
async def _streamable_http(
    spec: McpServerSpec, knobs: LoopKnobs, auth: httpx2.Auth | None
) -> AsyncIterator[TransportStreams]:
    assert spec.url is not None  # guaranteed by McpServerSpec's validator
    async with (
        http_client(spec, knobs, auth=auth) as client,
        streamable_http_client(spec.url, http_client=client) as streams,
    ):
        yield streams


@asynccontextmanager
async def _legacy_sse(
    spec: McpServerSpec, knobs: LoopKnobs, auth: httpx2.Auth | None
) -> AsyncIterator[TransportStreams]:
    assert spec.url is not None  # guaranteed by McpServerSpec's validator

    def client_factory(
        headers: dict[str, str] | None = None,
        timeout: httpx2.Timeout | None = None,
        auth: httpx2.Auth | None = auth,
    ) -> httpx2.AsyncClient:
        # Ours, not the SDK's: the same headers, timeouts and retries as streamable HTTP (whose
        # unbounded read suits the event stream, which idles for as long as the session lives).
        return http_client(spec, knobs, auth=auth)

    async with sse_client(spec.url, httpx_client_factory=client_factory, auth=auth) as streams:
        yield streams


def open_http_transport(
    spec: McpServerSpec, knobs: LoopKnobs, auth: httpx2.Auth | None = None
) -> AbstractAsyncContextManager[TransportStreams]:
    """Connect to the streamable HTTP (or legacy HTTP+SSE) server in `spec`; yield `(read, write)`.

    Leaving ends the session with a `DELETE`, bounded by `CLOSE_TIMEOUT_S` even when cancelled.
    """
    if spec.transport == "sse":
        return shielded_close(_legacy_sse(spec, knobs, auth), CLOSE_TIMEOUT_S)
    return shielded_close(_streamable_http(spec, knobs, auth), CLOSE_TIMEOUT_S)
