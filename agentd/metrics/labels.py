"""Bounded label values, and what a subagent's event means for the metrics (pure).

A label value comes from a fixed vocabulary (statuses, exit codes, rungs, verdicts, outcomes) or
from a name the operator configured (an endpoint, an MCP server, a schedule); anything else
becomes `other`. Task ids, run ids, handles, URIs and tool names never become labels, so the
number of series is fixed by the code and the configuration, not by the traffic.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass

from pydantic import JsonValue

from protocol.exit_codes import ExitCode
from protocol.result import TerminalStatus

OTHER = "other"
SELF_TOOLS = "self"  # a tool call with no MCP server: the subagent's own tools (e.g. delegation)

STATUSES = frozenset(s.value for s in TerminalStatus)
EXIT_CODES = frozenset(str(int(c)) for c in ExitCode)
RUNGS = frozenset({"cancel", "sigterm", "sigkill"})
KILL_CAUSES = frozenset({"cancel", "deadline", "stuck", "faulty", "drain", "park", "teardown"})
VERDICTS = frozenset({"deadline", "unresponsive", "starved", "wedged", "not_ready", "eof", "faulty"})
MODEL_OUTCOMES = frozenset({"ok", "malformed", "retry", "failover", "fatal"})
# `ok` and every `err` kind of a subagent's `tool.result` (`subagent/tools/router.py` ErrorKind;
# tests/metrics/test_registry.py keeps the two equal).
TOOL_OUTCOMES = frozenset(
    {
        "ok",
        "scope",
        "arguments",
        "tool_error",
        "timeout",
        "protocol",
        "invalid",
        "transport",
        "server_restarted",
        "server_withdrawn",
        "mcp_fatal",
        "cancelled",
        "denied",
    }
)
FIRE_KINDS = frozenset({"schedule", "trigger"})
ARM_STATES = frozenset(
    {"armed", "paused", "disabled", "failing", "starting", "unsupported", "backoff", "failed"}
)
FIRE_OUTCOMES = frozenset({"started", "skipped", "refused", "failed", "dropped"})


@dataclass(frozen=True, slots=True)
class KnownNames:
    """The names the configuration declares; only these may appear as label values."""

    endpoints: frozenset[str] = frozenset()
    servers: frozenset[str] = frozenset()
    schedules: frozenset[str] = frozenset()
    triggers: frozenset[str] = frozenset()


NamesSource = Callable[[], KnownNames]


def bounded(value: object, allowed: frozenset[str]) -> str:
    """`value` as a label if it is in `allowed`, else `other`."""
    text = str(value) if isinstance(value, str | int) and not isinstance(value, bool) else None
    return text if text is not None and text in allowed else OTHER


def server_label(value: JsonValue, names: KnownNames) -> str:
    if value is None:
        return SELF_TOOLS
    return bounded(value, names.servers)


def _count(value: JsonValue) -> int:
    return value if isinstance(value, int) and not isinstance(value, bool) and value >= 0 else 0


def _seconds(value: JsonValue) -> float | None:
    if isinstance(value, int | float) and not isinstance(value, bool) and value >= 0:
        return value / 1000
    return None


@dataclass(frozen=True, slots=True)
class ModelCall:
    endpoint: str
    outcome: str
    seconds: float | None
    tokens_in: int
    tokens_out: int


@dataclass(frozen=True, slots=True)
class ToolCall:
    server: str
    outcome: str
    seconds: float | None


@dataclass(frozen=True, slots=True)
class ServerRestart:
    server: str


Observation = ModelCall | ToolCall | ServerRestart


def observe(event: str, fields: Mapping[str, JsonValue], names: KnownNames) -> Observation | None:
    """What one `ev/event` adds to the metrics, with every label already bounded; None: nothing.

    A child is not trusted to keep to the vocabulary's field types: a missing or odd field becomes
    `other` or zero, never an error.
    """
    if event == "intel.result":
        return ModelCall(
            endpoint=bounded(fields.get("endpoint"), names.endpoints),
            outcome=bounded(fields.get("outcome"), MODEL_OUTCOMES),
            seconds=_seconds(fields.get("dur_ms")),
            tokens_in=_count(fields.get("tokens_in")),
            tokens_out=_count(fields.get("tokens_out")),
        )
    if event == "tool.result":
        err = fields.get("err")
        return ToolCall(
            server=server_label(fields.get("server"), names),
            outcome="ok" if err is None else bounded(err, TOOL_OUTCOMES),
            seconds=_seconds(fields.get("dur_ms")),
        )
    if event == "mcp.connect" and fields.get("outcome") == "reconnected":
        return ServerRestart(server=server_label(fields.get("server"), names))
    return None


def fire_name(kind: str, name: str, names: KnownNames) -> str:
    allowed: Mapping[str, frozenset[str]] = {"schedule": names.schedules, "trigger": names.triggers}
    return bounded(name, allowed.get(kind, frozenset()))
