"""The intelligence every caller uses: retries within an endpoint, then failover down the list.

Per call, endpoints are tried in order, skipping those whose circuit breaker is open. Within an
endpoint, an `IntelTransient` is retried per the retry plan (sleeping with `anyio.sleep`, so a
cancel lands at once); exhausted retries, auth/config errors and `IntelUnavailable` count a
breaker failure and move on. `ContextOverflow` is raised at once. When nothing answered: every
failure auth/config → `IntelFatal`, else `IntelUnavailable`, naming each endpoint's last error.

`intel.result` outcomes: `ok`; `malformed` (the reply could not be parsed, returned as a value);
`retry` (this endpoint will be tried again after `retry_in_ms`); `failover` (this endpoint gave
up); `fatal` (auth, a rejected request — its tools included —, or context overflow);
`unconstrained` (the endpoint rejected the request's response schema: the same request goes again
at once without it, and this process's later requests to that endpoint carry none). A server that
could not parse its own model's tool call answers `malformed` too (`err: ToolCallUnparsed`).
"""

from __future__ import annotations

import json
import random
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from typing import Literal

import anyio
from pydantic import JsonValue

from subagent.errors import (
    ContextOverflow,
    IntelError,
    IntelFatal,
    IntelStalled,
    IntelTransient,
    IntelUnavailable,
)
from subagent.intel.breaker import (
    Breaker,
    breaker_after_failure,
    breaker_after_success,
    breaker_allows,
    reopens_in_s,
)
from subagent.intel.classify import ConstraintRejected, EndpointFatal, ToolCallUnparsed, ToolsRejected
from subagent.intel.endpoint import Endpoint, Prepared, Sent
from subagent.intel.rate_headers import capturing
from subagent.intel.retry import RetryPolicy, retry_delay_s
from subagent.intel.slots import SlotOutcome, Slots
from subagent.intel.tool_memory import rejects_constraints, remember_unconstrained
from subagent.messages import ModelReply, ModelRequest, ToolCall
from subagent.telemetry import EventSink, describe

# With content capture on, each tool call of a reply is logged with its arguments cut here.
MAX_CAPTURED_ARGUMENTS = 1000


@dataclass(frozen=True, slots=True)
class _EndpointFailure:
    """Why an endpoint did not answer this call; `fatal_kind` is set for auth/config failures."""

    name: str
    error: str
    fatal_kind: str | None


def _captured_call(call: ToolCall) -> str:
    """`name {arguments}` as the model wrote them (or as parsed, when no raw text was kept), cut."""
    raw = call.raw_arguments or (json.dumps(call.arguments, ensure_ascii=False) if call.arguments else "{}")
    return f"{call.name[:64]} {raw[:MAX_CAPTURED_ARGUMENTS]}"


class FailoverIntelligence:
    """An `Intelligence` over an ordered endpoint list with per-endpoint breakers."""

    def __init__(
        self,
        endpoints: Sequence[Endpoint],
        policy: RetryPolicy,
        *,
        sink: EventSink,
        capture_content: bool = False,
        rng: random.Random | None = None,
        clock: Callable[[], float] = time.monotonic,
        slots: Slots | None = None,
    ) -> None:
        if not endpoints:
            raise IntelFatal("no intelligence endpoint is configured")
        self._endpoints = tuple(endpoints)
        self._policy = policy
        self._sink = sink
        self._capture = capture_content
        self._rng = rng or random.Random()
        self._clock = clock
        # The daemon's provider limits: a limited endpoint's request waits for a slot first; how
        # the last attempt's slot came (`intel.result`'s `slot_ms` and `slot_standing`).
        self._slots = slots
        self._slot: SlotOutcome | None = None
        self._breakers = [Breaker() for _ in self._endpoints]
        self._last_failure: list[_EndpointFailure | None] = [None for _ in self._endpoints]

    async def complete(self, request: ModelRequest) -> ModelReply:
        """One model call: a reply, or `IntelFatal` / `IntelUnavailable` / `ContextOverflow`."""
        failures: list[_EndpointFailure] = []
        last_error: IntelError | None = None
        for index, endpoint in enumerate(self._endpoints):
            now = self._clock()
            breaker = self._breakers[index]
            if not breaker_allows(breaker, now):
                previous = self._last_failure[index]
                cause = f"; last: {previous.error}" if previous else ""
                error = f"circuit open for {reopens_in_s(breaker, now):.1f}s more{cause}"
                failures.append(
                    _EndpointFailure(endpoint.spec.name, error, previous.fatal_kind if previous else None)
                )
                continue
            try:
                reply = await self._attempts(endpoint, request)
            except (ContextOverflow, ToolsRejected):
                # About this request, not the endpoint's health: the loop compacts, or switches
                # to JSON actions, and asks again.
                raise
            except (IntelTransient, IntelFatal, IntelUnavailable) as exc:
                fatal_kind = exc.kind if isinstance(exc, IntelFatal) else None
                failure = _EndpointFailure(endpoint.spec.name, str(exc), fatal_kind)
                self._breakers[index] = breaker_after_failure(self._breakers[index], self._clock())
                self._last_failure[index] = failure
                failures.append(failure)
                last_error = exc
                continue
            self._breakers[index] = breaker_after_success(self._breakers[index])
            self._last_failure[index] = None
            return reply
        summary = "; ".join(f"{f.name}: {f.error}" for f in failures)
        if all(f.fatal_kind for f in failures):
            kind: Literal["auth", "config"] = (
                "auth" if any(f.fatal_kind == "auth" for f in failures) else "config"
            )
            message = f"every intelligence endpoint refused the call — {summary}"
            raise EndpointFatal(message, kind=kind) from last_error
        raise IntelUnavailable(f"every intelligence endpoint failed — {summary}") from last_error

    async def _attempts(self, endpoint: Endpoint, request: ModelRequest) -> ModelReply:
        """Try one endpoint until it answers, fails fatally, or its retries are spent."""
        if request.response_schema is not None and rejects_constraints(endpoint.spec):
            request = replace(request, response_schema=None)
        prepared = endpoint.prepare(request)
        retry_index = 0
        stalls = 0
        while True:
            attempt = retry_index + 1
            self._emit_call(endpoint, prepared, attempt)
            started = anyio.current_time()
            try:
                sent = await self._send(endpoint, prepared)
            except IntelTransient as exc:
                stalls += isinstance(exc, IntelStalled)
                # The caller's cancel scope carries the run's deadline: a retry must end before it.
                remaining_s = anyio.current_effective_deadline() - anyio.current_time()
                delay_s = retry_delay_s(
                    self._policy,
                    retry_index,
                    rng=self._rng,
                    retry_after_s=exc.retry_after_s,
                    stalls=stalls,
                    remaining_s=remaining_s,
                )
                if delay_s is None:
                    self._emit_failure(endpoint, attempt, started, exc, "failover", status=exc.status)
                    spent = retry_index >= self._policy.retries or stalls > self._policy.stall_retries
                    why = "" if spent else "; no time left before the deadline to retry"
                    raise IntelTransient(
                        f"{exc} (after {attempt} attempts{why})",
                        retry_after_s=exc.retry_after_s,
                        status=exc.status,
                    ) from exc
                self._emit_failure(
                    endpoint, attempt, started, exc, "retry", status=exc.status, retry_in_s=delay_s
                )
                await anyio.sleep(delay_s)
                retry_index += 1
                continue
            except ConstraintRejected as exc:
                if not prepared.constrained:
                    self._emit_failure(endpoint, attempt, started, exc, "fatal", status=exc.status)
                    raise
                # The server takes no response schema (or not this one): the same request at once
                # without it, costing no retry — the reply is then read by the tolerant parsers.
                self._emit_failure(endpoint, attempt, started, exc, "unconstrained", status=exc.status)
                remember_unconstrained(endpoint.spec)
                prepared = endpoint.prepare(replace(request, response_schema=None))
                continue
            except ToolCallUnparsed as exc:
                # The model's malformed output, reported by its server: a reply for the loop to
                # re-ask, never retried as if the endpoint were down.
                self._emit_failure(endpoint, attempt, started, exc, "malformed", status=exc.status)
                return ModelReply(malformed=str(exc), unparsed_tool_call=True)
            except IntelUnavailable as exc:
                self._emit_failure(endpoint, attempt, started, exc, "failover", status=_status_of(exc))
                raise
            except (IntelFatal, ContextOverflow) as exc:
                self._emit_failure(endpoint, attempt, started, exc, "fatal", status=_status_of(exc))
                raise
            reply = replace(sent.reply, endpoint=endpoint.spec.name)
            fields: dict[str, JsonValue] = {
                "endpoint": endpoint.spec.name,
                "attempt": attempt,
                "outcome": "malformed" if reply.malformed is not None else "ok",
                "status": sent.status,
                "dur_ms": _ms_since(started),
                "tokens_in": reply.usage.tokens_in if reply.usage else None,
                "tokens_out": reply.usage.tokens_out if reply.usage else None,
            }
            if self._slot is not None and self._slot.waited_s is not None:
                fields["slot_ms"] = round(self._slot.waited_s * 1000, 3)
                fields["slot_standing"] = self._slot.standing
            if reply.finish_reason is not None:
                fields["finish_reason"] = reply.finish_reason
            if reply.tool_calls:
                fields["tool_calls"] = [call.name[:64] for call in reply.tool_calls]
            if self._capture:
                fields.update(describe(reply.text, capture=True, prefix="reply"))
                if reply.tool_calls:
                    # What the model asked for, as it wrote it (content: only with capture on).
                    fields["reply_tool_calls"] = [_captured_call(call) for call in reply.tool_calls]
            self._sink("intel.result", fields)
            return reply

    async def _send(self, endpoint: Endpoint, prepared: Prepared) -> Sent:
        """One attempt, holding a slot of the endpoint's provider limits when it has any."""
        self._slot = None
        if self._slots is None:
            return await endpoint.send(prepared)
        async with self._slots.held(endpoint.spec, prepared.size_bytes) as outcome:
            self._slot = outcome
            with capturing() as rate_headers:
                try:
                    sent = await endpoint.send(prepared)
                except IntelError as exc:
                    outcome.status = _status_of(exc)
                    outcome.retry_after_s = exc.retry_after_s if isinstance(exc, IntelTransient) else None
                    raise
                finally:
                    outcome.rate_headers = dict(rate_headers)
            usage = sent.reply.usage
            outcome.status = sent.status
            outcome.tokens_used = usage.tokens_in + usage.tokens_out if usage is not None else None
            return sent

    def _emit_call(self, endpoint: Endpoint, prepared: Prepared, attempt: int) -> None:
        request = prepared.request
        fields: dict[str, JsonValue] = {
            "endpoint": endpoint.spec.name,
            "attempt": attempt,
            "model": endpoint.spec.model,
            "purpose": request.purpose,
            "messages": len(request.messages),
            "request_bytes": prepared.size_bytes,
        }
        if self._capture and request.messages:
            fields.update(describe(request.messages[-1].text, capture=True, prefix="last_message"))
        self._sink("intel.call", fields)

    def _emit_failure(
        self,
        endpoint: Endpoint,
        attempt: int,
        started: float,
        exc: IntelError,
        outcome: str,
        *,
        status: int | None,
        retry_in_s: float | None = None,
    ) -> None:
        fields: dict[str, JsonValue] = {
            "endpoint": endpoint.spec.name,
            "attempt": attempt,
            "outcome": outcome,
            "status": status,
            "dur_ms": _ms_since(started),
            "err": _error_name(exc),
        }
        if exc.__cause__ is not None:
            fields["cause"] = type(exc.__cause__).__name__
        if retry_in_s is not None:
            fields["retry_in_ms"] = round(retry_in_s * 1000)
        self._sink("intel.result", fields)


def _ms_since(started: float) -> int:
    return round((anyio.current_time() - started) * 1000)


def _status_of(exc: IntelError) -> int | None:
    status = getattr(exc, "status", None)
    return status if isinstance(status, int) else None


def _error_name(exc: IntelError) -> str:
    """The public class an error belongs to (adapters raise private subclasses)."""
    for public in (
        ToolsRejected,
        ConstraintRejected,
        ToolCallUnparsed,
        ContextOverflow,
        IntelUnavailable,
        IntelFatal,
        IntelTransient,
    ):
        if isinstance(exc, public):
            return public.__name__
    return type(exc).__name__
