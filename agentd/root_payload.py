"""The root subagent's spawn payload, built from a queued task and the configuration (docs/design.md §4).

`build_payload` runs at spawn time, not at submit: it reads secrets then, so a rotated key is
picked up by the next task, and a task whose endpoint or server has since left the configuration
ends with a `PayloadError` instead of running with stale settings.
"""

from __future__ import annotations

import os
from pathlib import Path

from agentd.config.load import Config, ConfigError, NotConfigured
from agentd.journal.records import TaskRecord
from agentd.supervision.task_payloads import PayloadError
from protocol.approval import client_gates
from protocol.spawn import SpawnPayload, Telemetry


def new_traceparent() -> str:
    """A fresh W3C trace context for one run."""
    return f"00-{os.urandom(16).hex()}-{os.urandom(8).hex()}-01"


def granted_deadline_s(config: Config, record: TaskRecord) -> float:
    """The deadline `build_payload(config, record)` grants, without building the payload: no
    secret is read and nothing is written (a remote executor sizes its workflow's timeouts by it)."""
    return config.limits_for(record.spec).deadline_s


def build_payload(config: Config, record: TaskRecord) -> SpawnPayload:
    """The root subagent's spawn payload for `record`."""
    spec = record.spec
    try:
        endpoints = config.endpoint_chain(spec.model)
        servers = [config.mcp_spec(name) for name in config.mcp_names_for(spec)]
    except (NotConfigured, ConfigError) as exc:
        raise PayloadError(str(exc)) from None
    # A client's `--approve` adds to the operator's gate, never removes from it.
    servers = [
        s.model_copy(
            update={"approval": list(dict.fromkeys([*s.approval, *client_gates(spec.approve, s.name)]))}
        )
        for s in servers
    ]
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
        # A schedule's fire may report that it found nothing to do (a loop backs off on it).
        idle_signal=record.schedule_id is not None,
        # A task that pauses at its budget goes on later: no last answer is asked of the model.
        wrap_up=(spec.on_budget or config.defaults.on_budget) != "pause",
    )
