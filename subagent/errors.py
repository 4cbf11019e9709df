"""Exceptions of the subagent. Those under IntelError and McpError end a run (a failed tool call
is an observation, not one of these); the others are raised and handled inside one component.

AgentError
 ├── IntelError                 the model endpoint(s)
 │    ├── IntelTransient        retryable (429, 5xx, network, stalled stream); never leaves intel/
 │    │    └── IntelStalled     the endpoint went silent (no reply within request_timeout_s, a body or
 │    │                         stream idle past its bound, no first token): retried only once
 │    ├── IntelFatal            auth or unusable configuration: abort `intelligence` at once
 │    │    ├── EndpointFatal    one endpoint's classified failure, with its kind and HTTP status
 │    │    │    │               (subagent/intel/classify.py)
 │    │    │    ├── ToolsRejected  the endpoint refused the request's `tools`: an `auto` run
 │    │    │    │                  switches to JSON actions (same module)
 │    │    │    └── ConstraintRejected  the endpoint refused the request's response schema: the
 │    │    │                       request goes again at once without it (same module)
 │    │    └── ContextTooSmall  the fixed part of every request (system prompt, task, tool
 │    │                         catalogue) leaves no room for a reply in the context window
 │    ├── ToolCallUnparsed      the server could not parse its model's tool call: returned as a
 │    │                         malformed reply by the failover driver (subagent/intel/classify.py)
 │    ├── IntelUnavailable      retries and failover exhausted: abort `intelligence`
 │    └── ContextOverflow       the request did not fit: compact and retry once
 │         └── EndpointOverflow  one endpoint said so, with its HTTP status (same module)
 ├── McpError
 │    ├── McpFatal              a required MCP server is unreachable or died: abort `mcp`
 │    └── LoginRequired         an `authorization_code` server has no usable stored login: its
 │                              connect fails asking for `agentd mcp login NAME`
 │                              (subagent/tools/oauth_store.py, subagent/oauth_login.py)
 ├── StepNotRecorded            the supervisor could not journal a step: the run ends `crashed`
 │                              rather than act on a step that would not survive a restart
 │                              (subagent/resume.py)
 ├── WatchEnded                 a resource watcher's session cannot go on (subagent/watch/run.py)
 │    ├── WatchUnsupported      the server cannot notify about resource changes: exit 0, once
 │    └── WatchLost             the session died (server exit, transport error): exit 6
 ├── ChannelClosed              also a ConnectionError: the control channel to the supervisor is
 │                              gone (subagent/channel.py)
 ├── SseError                   also a ValueError: an event stream broke a size cap
 │                              (subagent/intel/sse.py)
 └── OversizedLine              also a ValueError: a stdio MCP server wrote a line over the cap,
                                handed to the SDK as a parse error (subagent/tools/stdio.py)

Every exception class defined anywhere in `subagent/` is drawn here (tests/test_architecture.py).
"""

from __future__ import annotations


class AgentError(Exception):
    """Root of the subagent's error tree."""


class IntelError(AgentError):
    """A model endpoint failed."""

    kind = "intelligence"


class IntelTransient(IntelError):
    """A failure worth retrying. `retry_after_s` is the server's `Retry-After`, if it sent one."""

    kind = "transient"

    def __init__(
        self, message: str, *, retry_after_s: float | None = None, status: int | None = None
    ) -> None:
        super().__init__(message)
        self.retry_after_s = retry_after_s
        self.status = status


class IntelStalled(IntelTransient):
    """The endpoint went silent past a named timeout. Retried once, not `transport_retries` times:
    each attempt already waited the whole timeout, and a server that went silent twice is wedged."""

    kind = "stalled"


class IntelFatal(IntelError):
    """Authentication failure or a configuration the endpoint rejects: retrying cannot help."""

    kind = "auth"


class ContextTooSmall(IntelFatal):
    """The system prompt, task and tool catalogue alone leave no room for a reply (loop/window.py)."""

    kind = "context_window"


class IntelUnavailable(IntelError):
    """Every endpoint failed after bounded retries."""

    kind = "unavailable"


class ContextOverflow(IntelError):
    """The endpoint said the request exceeds the model's context window."""

    kind = "context_overflow"


class McpError(AgentError):
    """An MCP server failed in a way the loop cannot turn into an observation."""


class McpFatal(McpError):
    """A required MCP server cannot be reached (at connect, or after it died and a reconnect failed)."""

    kind = "mcp_down"


class LoginRequired(McpError):
    """No usable stored OAuth login for a server (none, for another URL, unreadable, or refused and
    not refreshable); `str()` tells the operator what to run."""


class StepNotRecorded(AgentError):
    """A transcript step was not journaled (refused, or no answer in time); `str()` says why."""

    kind = "journal"


class WatchEnded(AgentError):
    """A resource watcher's session cannot go on; `str()` says why, for `detail` and the log."""


class WatchUnsupported(WatchEnded):
    """The server offers no way to hear about resource changes (reported once; not restarted)."""


class WatchLost(WatchEnded):
    """The watcher's session died: the supervisor's governor restarts the watcher."""
