"""What a submitted spec must satisfy before it is journaled (docs/design.md §9, §14).

`check_spec` runs at submit time and turns every problem a client can cause (an unknown model or
MCP server, a grant that breaks the Rule of Two, an invalid output schema) into one clear
`SpecRejected`, so nothing that cannot run is ever queued.
"""

from __future__ import annotations

import fnmatch
from collections.abc import Iterable
from dataclasses import dataclass

from agentd.config.allow import permits
from agentd.config.load import Config, ConfigError, NotConfigured
from agentd.errors import AgentdError
from protocol.api import TaskSpec
from protocol.approval import pattern_problem, split_client_pattern
from protocol.contract import contract_problem


class SpecRejected(AgentdError):
    """A submitted spec the daemon cannot run; the message says why in the client's terms."""


@dataclass(frozen=True, slots=True)
class Requester:
    """Who asks for a task: the `allow` lists of servers and endpoints are checked against it."""

    uid: int
    groups: frozenset[int]
    admin: bool


def check_spec(config: Config, spec: TaskSpec, requester: Requester | None = None) -> None:
    """Validate a spec against the configuration (names, who may use them, Rule of Two, output
    schema). `requester` None: the local user's own embedded run (`agentd run`), not checked."""
    try:
        config.endpoint_chain(spec.model)
        names = config.mcp_names_for(spec)
    except NotConfigured as exc:
        raise SpecRejected(str(exc)) from None
    except ConfigError as exc:
        # A secret the operator configured is unreadable: the daemon's fault, not the client's.
        raise SpecRejected(f"the daemon cannot use that configuration now: {exc}") from None
    if requester is not None and not requester.admin:
        problem = allow_problem(config, spec.model or config.default_model, names, requester)
        if problem is not None:
            raise SpecRejected(problem)
    problem = config.unpriced_problem(spec)
    if problem is not None:
        raise SpecRejected(problem)
    violation = config.rule_of_two_violation(names)
    if violation is not None:
        raise SpecRejected(violation)
    problem = contract_problem(spec.output_contract)
    if problem is not None:
        raise SpecRejected(problem)
    problem = approval_problem(spec.approve, names)
    if problem is not None:
        raise SpecRejected(problem)


def approval_problem(patterns: list[str], granted: list[str]) -> str | None:
    """Why a client's `--approve` patterns are unusable: a bad pattern, or one naming a server the
    task is not granted (it would gate nothing, silently)."""
    for pattern in patterns:
        problem = pattern_problem(pattern)
        if problem is not None:
            return f"approve: {problem}"
        server_glob, tool_glob = split_client_pattern(pattern)
        if not tool_glob or not server_glob:
            return f"approve: {pattern!r} needs a server and a tool (server/tool_glob) or a tool glob"
        if not any(fnmatch.fnmatchcase(name, server_glob) for name in granted):
            listed = ", ".join(granted) or "none"
            return f"approve: {pattern!r} names no MCP server granted to this task (granted: {listed})"
    return None


def allow_problem(config: Config, model: str, servers: Iterable[str], requester: Requester) -> str | None:
    """Which endpoint or server the operator's `allow` lists keep from `requester`, or None. Only
    the endpoint a task names (or the default) is checked: its fallbacks are the operator's chain."""
    endpoint = config.file.intelligence[model]
    if not permits(endpoint.allow, requester.uid, requester.groups):
        uid = requester.uid
        return f"model: uid {uid} may not use intelligence endpoint {model!r} (intelligence.{model}.allow)"
    for name in servers:
        if not permits(config.mcp[name].section.allow, requester.uid, requester.groups):
            return f"mcp: uid {requester.uid} may not be granted MCP server {name!r} (mcp.{name}.allow)"
    return None
