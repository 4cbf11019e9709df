"""What a submitted spec must satisfy before it is journaled (DESIGN §9, §14).

`check_spec` runs at submit time and turns every problem a client can cause (an unknown model or
MCP server, a grant that breaks the Rule of Two, an invalid output schema) into one clear
`SpecRejected`, so nothing that cannot run is ever queued.
"""

from __future__ import annotations

from agentd.config.load import Config, ConfigError, NotConfigured
from agentd.errors import AgentdError
from protocol.api import TaskSpec
from protocol.contract import contract_problem


class SpecRejected(AgentdError):
    """A submitted spec the daemon cannot run; the message says why in the client's terms."""


def check_spec(config: Config, spec: TaskSpec) -> None:
    """Validate a spec against the configuration (names, Rule of Two, output schema)."""
    try:
        config.endpoint_chain(spec.model)
        names = config.mcp_names_for(spec)
    except NotConfigured as exc:
        raise SpecRejected(str(exc)) from None
    except ConfigError as exc:
        # A secret the operator configured is unreadable: the daemon's fault, not the client's.
        raise SpecRejected(f"the daemon cannot use that configuration now: {exc}") from None
    violation = config.rule_of_two_violation(names)
    if violation is not None:
        raise SpecRejected(violation)
    problem = contract_problem(spec.output_contract)
    if problem is not None:
        raise SpecRejected(problem)
