"""From a submitted task to what its root subagent may use: validation and the spawn payload.

`check_spec` runs at submit time and turns every problem a client can cause (an unknown model or
MCP server, a grant that breaks the Rule of Two, an invalid output schema) into one clear
`SpecRejected`. `build_payload` runs at spawn time; it reads secrets then, so a rotated key is
picked up by the next task. `supervisor_options` maps the configuration onto the supervisor.
"""

from __future__ import annotations

import os
from pathlib import Path

from agentd.config.load import Config, ConfigError, NotConfigured
from agentd.errors import AgentdError
from agentd.journal.records import TaskRecord
from agentd.journal.store import JournalOptions
from agentd.spawning.spawner import RLimits
from agentd.supervision.liveness import LivenessPolicy
from agentd.supervision.supervisor import PayloadError, SupervisorOptions
from processes.ladder import LadderPolicy
from protocol.api import TaskSpec
from protocol.contract import schema_error
from protocol.spawn import SpawnPayload, Telemetry


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
    schema = spec.output_contract.schema_
    problem = None if schema is None else schema_error(schema)
    if problem is not None:
        raise SpecRejected(f"output_contract.schema is not a valid JSON Schema: {problem}")


def new_traceparent() -> str:
    """A fresh W3C trace context for one run."""
    return f"00-{os.urandom(16).hex()}-{os.urandom(8).hex()}-01"


def build_payload(config: Config, record: TaskRecord) -> SpawnPayload:
    """The root subagent's spawn payload for `record`."""
    spec = record.spec
    try:
        endpoints = config.endpoint_chain(spec.model)
        servers = [config.mcp_spec(name) for name in config.mcp_names_for(spec)]
    except (NotConfigured, ConfigError) as exc:
        raise PayloadError(str(exc)) from None
    notes = Path(config.state_dir) / "notes" / f"{record.task_id}.md"
    notes.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
    return SpawnPayload(
        task_id=record.task_id,
        run_id=record.run_id,
        handle="0",
        depth=0,
        instruction=spec.instruction,
        output_contract=spec.output_contract,
        intelligence=endpoints,
        mcp_servers=servers,
        limits=config.limits_for(spec),
        loop=config.loop_knobs().model_copy(update=spec.loop.model_dump(exclude_none=True)),
        telemetry=Telemetry(
            log_level=config.daemon.log_level,
            capture_content=config.daemon.log_content,
            traceparent=new_traceparent(),
        ),
        notes_path=str(notes),
    )


def _finite(value: int | float | None) -> int | None:
    if value is None or value == float("inf"):
        return None
    return int(value)


def journal_options(config: Config) -> JournalOptions:
    return JournalOptions(events_per_task=config.daemon.max_events_per_task)


def supervisor_options(config: Config) -> SupervisorOptions:
    sup = config.supervision
    lim = config.limits
    return SupervisorOptions(
        max_concurrent_tasks=config.daemon.max_concurrent_tasks,
        liveness=LivenessPolicy(
            ping_interval_s=sup.ping_interval_s,
            missed_pongs=sup.missed_pongs,
            loop_stall_s=sup.loop_stall_s,
            deadline_backstop_s=sup.deadline_backstop_s,
            ready_timeout_s=sup.ready_timeout_s,
            eof_grace_s=sup.eof_grace_s,
            max_faults=sup.max_protocol_faults,
        ),
        ladder=LadderPolicy(
            cancel_grace_s=sup.cancel_grace_s, term_grace_s=sup.term_grace_s, kill_reap_s=sup.kill_reap_s
        ),
        rlimits=RLimits(
            address_space=_finite(lim.address_space_bytes),
            cpu_seconds=_finite(lim.cpu_seconds),
            nofile=lim.nofile,
            core=0,
        ),
        memory_max=_finite(lim.memory_max_bytes),
        pids_max=_finite(lim.pids_max),
        drain_timeout_s=config.daemon.drain_timeout_s,
        orphan_sweep_interval_s=sup.orphan_sweep_interval_s,
        child_argv=tuple(sup.child_command) if sup.child_command else None,
        child_steps=config.defaults.child_max_steps,
        child_tokens=config.defaults.child_max_tokens,
        stderr_line_cap=sup.stderr_line_cap,
    )
