"""The supervisor's error tree.

AgentdError
 ├── SpawnError            a subagent process could not be started
 ├── JournalError          the durable journal (agentd/journal/store.py)
 │    ├── JournalUnavailable   retryable: the write was not committed (disk full, I/O error,
 │    │                        read-only or locked database, writer stalled, journal closed)
 │    ├── JournalLocked        another agentd holds the state dir's lock
 │    ├── TaskNotFound         no task has that id
 │    ├── NodeNotFound         no node of that task has that handle
 │    ├── InvalidTransition    the task's state does not allow the requested transition
 │    ├── ScheduleNotFound     no schedule has that id (or it changed under a fire)
 │    ├── QuotaExceeded        retryable: the submitting uid is at a per-uid cap
 │    │                        (agentd/journal/quota.py)
 │    └── IdempotencyConflict  the uid's idempotency key names a task with a different spec
 ├── _BatchLost            (private) the writer's transaction is gone (agentd/journal/writer.py)
 ├── TaskGone              a task ended (cancelled while queued) before its run claimed it
 │                         (agentd/supervision/node_launch.py)
 ├── ConfigError           the configuration is invalid: a list of problems, each naming its key
 ├── DurationError         also a ValueError: not a duration or size (agentd/config/duration.py)
 ├── SecretFileError       also a ValueError: a secrets file cannot be used (agentd/config/secrets.py)
 ├── SecretUnavailable     also a ValueError: a secret's source cannot be read (same module)
 ├── NotConfigured         a request names an endpoint or MCP server the configuration lacks
 ├── ApiError              a daemon API request refused (JSON-RPC error code + retryable);
 │                         raised by a Backend, answered by agentd/api/connection.py
 ├── ListenerError         the API socket cannot be bound or adopted (agentd/api/listener.py)
 │    └── DaemonRunning        a live daemon already answers on the socket path
 ├── _ConnectionLost       (private) an API client can no longer be written to
 │                         (agentd/api/connection.py)
 ├── ApiClientError        an API call failed, as the client sees it (agentd/api/client.py)
 ├── ListenError           also a ValueError: a client program's `HOST:PORT` cannot be served
 │                         (agentd/api/listen_address.py)
 ├── UsageError            a bad command-line flag value: exit 2 before anything is sent
 ├── ShapeError            also a ValueError: a task the daemon sent lacks a field the CLI reads,
 │                         or holds it with the wrong type (agentd/cli/task_facts.py)
 ├── SpecRejected          a submitted spec the daemon cannot run (agentd/admission.py)
 ├── CheckTimedOut         a check of client input outlived its time bound (agentd/off_loop.py)
 ├── TriggerError          also a ValueError: a schedule's cron, zone or interval cannot be
 │                         evaluated; names the field (agentd/scheduling/plan.py)
 ├── PayloadError          a queued task can no longer be built into a spawn payload
 │                         (agentd/supervision/task_payloads.py)
 ├── ExecutorUnavailable   retryable: the executor (Temporal) did not durably accept a task,
 │                         or cannot be reached at start-up (agentd/executors/)
 └── UnsafeDirectory       a state or socket directory another user could change, or a symlink
                           planted in one (agentd/private_dirs.py)

Every exception class defined anywhere in `agentd/` is drawn here (tests/test_architecture.py
checks it); those defined outside this module are named with theirs.
"""

from __future__ import annotations

from dataclasses import dataclass, field


class AgentdError(Exception):
    """Root of the supervisor's error tree."""


class SpawnError(AgentdError):
    """A subagent process could not be started (exec failed, pipes, limits)."""


class JournalError(AgentdError):
    """The durable journal failed or refused an operation."""


class JournalUnavailable(JournalError):
    """Retryable: the operation was not committed, so nothing was acknowledged."""


class JournalLocked(JournalError):
    """Another agentd process holds the exclusive lock on the state directory."""


class TaskNotFound(JournalError):
    """No task with that id exists in the journal."""

    def __init__(self, task_id: str) -> None:
        super().__init__(f"no task {task_id!r}")
        self.task_id = task_id


class NodeNotFound(JournalError):
    """No node with that handle exists in the task's tree."""

    def __init__(self, task_id: str, handle: str) -> None:
        super().__init__(f"task {task_id!r} has no node {handle!r}")
        self.task_id = task_id
        self.handle = handle


class InvalidTransition(JournalError):
    """A lifecycle transition was requested from a state that does not allow it."""

    def __init__(self, task_id: str, state: str, wanted: str) -> None:
        super().__init__(f"task {task_id!r} is {state}; cannot move it to {wanted}")
        self.task_id = task_id
        self.state = state
        self.wanted = wanted


class ScheduleNotFound(JournalError):
    """No schedule has that id, or it is no longer in the state an operation expected."""

    def __init__(self, schedule_id: str) -> None:
        super().__init__(f"no schedule {schedule_id!r}")
        self.schedule_id = schedule_id


class QuotaExceeded(JournalError):
    """Retryable: the submitting uid is at a per-uid cap; the message names the cap and the value."""


class IdempotencyConflict(JournalError):
    """A submit (or a schedule's creation: `what`) reused an idempotency key of the same uid with
    a different spec: nothing written."""

    def __init__(self, key: str, task_id: str, *, what: str = "task") -> None:
        super().__init__(
            f"idempotency key {key!r} was already used for {what} {task_id} with a different spec; "
            f"use a new key for a different {what}"
        )
        self.key = key
        self.task_id = task_id


@dataclass(frozen=True, slots=True)
class ConfigProblem:
    """One thing wrong with a configuration. `key` is the dotted path (`mcp.fs.command`), or ""
    for the file as a whole; `message` says what is wrong in plain words and never holds a secret."""

    key: str
    message: str
    # Set on "no endpoint/server named X": the entry (`intelligence.X`, `mcp.X`) it says is missing,
    # so the problem can be dropped when that entry exists but was itself invalid (and reported).
    about: str | None = field(default=None, compare=False)

    def __str__(self) -> str:
        return f"{self.key}: {self.message}" if self.key else self.message


class ConfigError(AgentdError):
    """The configuration cannot be used. `source` is the file (or "embedded defaults")."""

    def __init__(self, source: str, problems: list[ConfigProblem]) -> None:
        self.source = source
        self.problems = problems
        lines = "".join(f"\n  {p}" for p in problems)
        super().__init__(f"invalid configuration ({source}):{lines}")


class NotConfigured(AgentdError, LookupError):
    """A task or a trigger names an endpoint or MCP server that the configuration does not define."""

    def __init__(self, key: str, what: str, name: str, available: list[str]) -> None:
        listed = ", ".join(available) if available else "none"
        super().__init__(f"{key}: no {what} named {name!r} is configured (available: {listed})")
        self.key = key
        self.name = name
        self.available = available


class ApiError(AgentdError):
    """A daemon API request the daemon refuses. `code` is one of `protocol.api`'s codes (or a
    JSON-RPC one); the client sees `{code, message, data: {"retryable": retryable}}`."""

    def __init__(self, code: int, message: str, *, retryable: bool = False) -> None:
        super().__init__(message)
        self.code = code
        self.message = message
        self.retryable = retryable


class ListenerError(AgentdError):
    """The API socket cannot be bound or adopted (bad path, not a socket, wrong kind of fd)."""


class DaemonRunning(ListenerError):
    """A live daemon already owns the socket path; it is never displaced."""


class ApiClientError(AgentdError):
    """An API call failed. `code` is the daemon's error code, or one of `agentd.api.client`'s
    local codes (unreachable, timed out, bad response, connection lost); `retryable` says
    whether the same call may succeed later."""

    def __init__(self, code: int, message: str, *, retryable: bool = False) -> None:
        super().__init__(message)
        self.code = code
        self.message = message
        self.retryable = retryable


class UsageError(AgentdError):
    """A bad flag value: reported with exit code 2 before anything is sent."""


class ExecutorUnavailable(AgentdError):
    """The task executor (a Temporal cluster) cannot be reached or did not accept the task."""


class UnsafeDirectory(AgentdError):
    """A directory the daemon must not use (a symlink, another user's, writable by others), or a
    file in one that is not what the daemon created; the message says why and what to do."""
