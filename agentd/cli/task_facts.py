"""A task as the CLI reads it, without the models (pure): what `agentd status` and `agentd list`
print, decoded from the daemon's JSON with the standard library.

`TaskLike` (`task_like`) is every field the CLI's text reads (`task_text`, `outcome`);
`protocol.api.TaskView` has them, and so has `TaskFacts`, decoded here from a `task.get` or
`task.list` result. This is a
second description of part of the wire beside `protocol/api.py`, kept because building the models
costs a client command more than the rest of its run (docs/decisions.md, "A read path without the
models"); tests/cli/test_plain_wire.py holds it equal to the models. A field it does not read is
ignored; one it reads with the wrong type is a `ShapeError`.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from agentd.errors import AgentdError
from protocol.status import TerminalStatus


class ShapeError(AgentdError, ValueError):
    """A field the CLI reads is missing or of the wrong type; the message names it."""


@dataclass(frozen=True, slots=True)
class UsageFacts:
    tokens_in: int = 0
    tokens_out: int = 0
    steps: int = 0
    cost_usd: float = 0.0

    @property
    def tokens(self) -> int:
        return self.tokens_in + self.tokens_out


@dataclass(frozen=True, slots=True)
class ErrorFacts:
    kind: str
    message: str


@dataclass(frozen=True, slots=True)
class ThrottleFacts:
    endpoint: str
    blocked_by: str
    waiting_s: float


@dataclass(frozen=True, slots=True)
class DeferralFacts:
    until: float
    reason: str


@dataclass(frozen=True, slots=True)
class OriginFacts:
    task_id: str
    step: int


@dataclass(frozen=True, slots=True)
class TaskFacts:
    """A task's fields the CLI reads, decoded from JSON (`task_facts`)."""

    task_id: str
    state: str
    status: TerminalStatus | None
    exit_code: int | None
    result: object
    partial: bool
    usage: UsageFacts
    abort: str | None
    error: ErrorFacts | None
    instruction: str
    model: str | None
    mcp: list[str]
    created_at: float
    started_at: float | None
    ended_at: float | None
    pid: int | None
    schedule_id: str | None
    trigger: str | None
    uri: str | None
    executor: str | None
    worker: str | None
    resumes: int
    forked_from: OriginFacts | None
    throttled: ThrottleFacts | None
    deferred: DeferralFacts | None


_NUMBER = (int, float)


def _field(data: Mapping[str, Any], name: str, kind: type | tuple[type, ...], default: Any = ...) -> Any:
    """`data[name]` if it is of `kind` (`bool` is never taken for a number), else a ShapeError."""
    value = data.get(name, default)
    if value is ...:
        raise ShapeError(f"{name} is missing")
    kinds = kind if isinstance(kind, tuple) else (kind,)
    if isinstance(value, bool) and bool not in kinds:
        raise ShapeError(f"{name} is not a {kinds[0].__name__}")
    if not isinstance(value, kinds):
        raise ShapeError(f"{name} is not a {kinds[0].__name__}")
    return value


def _optional(data: Mapping[str, Any], name: str, kind: type | tuple[type, ...]) -> Any:
    return None if data.get(name) is None else _field(data, name, kind)


def _object(data: Mapping[str, Any], name: str) -> Mapping[str, Any] | None:
    value: Mapping[str, Any] | None = _optional(data, name, dict)
    return value


def _seconds(data: Mapping[str, Any], name: str) -> float | None:
    """A time as the model holds it: a float (JSON may spell a whole one as an integer)."""
    value = _optional(data, name, _NUMBER)
    return float(value) if value is not None else None


def usage_facts(data: Mapping[str, Any]) -> UsageFacts:
    return UsageFacts(
        tokens_in=_field(data, "tokens_in", int, 0),
        tokens_out=_field(data, "tokens_out", int, 0),
        steps=_field(data, "steps", int, 0),
        cost_usd=float(_field(data, "cost_usd", _NUMBER, 0.0)),
    )


def task_facts(data: object) -> TaskFacts:
    """A task view's JSON (`task.get`'s result, an item of `task.list`'s) as `TaskFacts`.

    Raises:
        ShapeError: a field the CLI reads is missing or of the wrong type.
    """
    if not isinstance(data, dict):
        raise ShapeError("the task is not a JSON object")
    status = _optional(data, "status", str)
    try:
        terminal = TerminalStatus(status) if status is not None else None
    except ValueError:
        raise ShapeError(f"status {status!r} is not a terminal status") from None
    usage = _object(data, "usage")
    mcp = _field(data, "mcp", list, [])
    if not all(isinstance(name, str) for name in mcp):
        raise ShapeError("mcp is not a list of names")
    return TaskFacts(
        task_id=_field(data, "task_id", str),
        state=_field(data, "state", str),
        status=terminal,
        exit_code=_optional(data, "exit_code", int),
        result=data.get("result"),
        partial=_field(data, "partial", bool, False),
        usage=usage_facts(usage) if usage is not None else UsageFacts(),
        abort=_optional(data, "abort", str),
        error=_error(_object(data, "error")),
        instruction=_field(data, "instruction", str, ""),
        model=_optional(data, "model", str),
        mcp=mcp,
        created_at=float(_field(data, "created_at", _NUMBER, 0.0)),
        started_at=_seconds(data, "started_at"),
        ended_at=_seconds(data, "ended_at"),
        pid=_optional(data, "pid", int),
        schedule_id=_optional(data, "schedule_id", str),
        trigger=_optional(data, "trigger", str),
        uri=_optional(data, "uri", str),
        executor=_optional(data, "executor", str),
        worker=_optional(data, "worker", str),
        resumes=_field(data, "resumes", int, 0),
        forked_from=_origin(_object(data, "forked_from")),
        throttled=_throttle(_object(data, "throttled")),
        deferred=_deferral(_object(data, "deferred")),
    )


def _error(data: Mapping[str, Any] | None) -> ErrorFacts | None:
    return None if data is None else ErrorFacts(_field(data, "kind", str), _field(data, "message", str))


def _origin(data: Mapping[str, Any] | None) -> OriginFacts | None:
    return None if data is None else OriginFacts(_field(data, "task_id", str), _field(data, "step", int))


def _throttle(data: Mapping[str, Any] | None) -> ThrottleFacts | None:
    if data is None:
        return None
    waiting_s = float(_field(data, "waiting_s", _NUMBER))
    return ThrottleFacts(_field(data, "endpoint", str), _field(data, "blocked_by", str), waiting_s)


def _deferral(data: Mapping[str, Any] | None) -> DeferralFacts | None:
    if data is None:
        return None
    return DeferralFacts(float(_field(data, "until", _NUMBER)), _field(data, "reason", str))
