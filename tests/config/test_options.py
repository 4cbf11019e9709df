"""The configuration's defaults and the option objects' defaults are the same numbers: the embedded
defaults map onto exactly what each component assumes when built without a configuration."""

from __future__ import annotations

from pathlib import Path

import pytest

from agentd.api.limits import ApiLimits
from agentd.config.load import ConfigError, load_config
from agentd.config.sections import TriggerSection
from agentd.daemon import api_limits
from agentd.journal.store import JournalOptions
from agentd.options import journal_options, supervisor_options, warm_payload
from agentd.supervision.liveness import LivenessPolicy
from agentd.supervision.ports import RunOptions
from agentd.supervision.supervisor import SupervisorOptions
from processes.ladder import LadderPolicy
from protocol.spawn import EndpointSpec, SpawnPayload, WarmSpec


def test_the_embedded_defaults_are_the_components_defaults(tmp_path: Path) -> None:
    config = load_config(environ={"HOME": str(tmp_path)})
    options = supervisor_options(config)
    assert options.run.liveness == LivenessPolicy()
    assert options.run.ladder == LadderPolicy()
    defaults = SupervisorOptions()
    assert (
        options.max_concurrent_tasks,
        options.drain_timeout_s,
        options.orphan_sweep_interval_s,
        options.spawn_window,
    ) == (
        defaults.max_concurrent_tasks,
        defaults.drain_timeout_s,
        defaults.orphan_sweep_interval_s,
        defaults.spawn_window,
    )
    run = RunOptions()
    assert (options.run.child_steps, options.run.child_tokens, options.run.stderr_line_cap) == (
        run.child_steps,
        run.child_tokens,
        run.stderr_line_cap,
    )
    assert journal_options(config) == JournalOptions()
    assert api_limits(config) == ApiLimits()


def test_a_per_uid_connection_cap_above_the_total_is_refused(tmp_path: Path) -> None:
    config = tmp_path / "agentd.toml"
    config.write_text("[daemon]\nmax_connections_per_uid = 64\nmax_connections = 32\n")
    with pytest.raises(ConfigError) as caught:
        load_config(str(config), environ={"HOME": str(tmp_path)})
    assert [(p.key, p.message) for p in caught.value.problems] == [
        ("daemon.max_connections_per_uid", "must not exceed daemon.max_connections (32)")
    ]


def test_a_continue_triggers_keys_become_its_warm_session_payload() -> None:
    section = TriggerSection.model_validate(
        {
            "server": "status",
            "uri": "status://incidents",
            "route": "continue",
            "instruction": "watch",
            "turn_max_steps": 7,
            "turn_max_tokens": 9000,
            "turn_deadline": "90s",
            "session_max_tokens": 50_000,
            "session_idle_timeout": "10m",
            "session_max_life": "2h",
        }
    )
    base = SpawnPayload(
        task_id="t",
        run_id="r",
        instruction="watch",
        intelligence=[EndpointSpec(kind="openai", base_url="http://127.0.0.1:9/v1")],
    )
    payload = warm_payload(base, section)
    assert payload.warm
    assert payload.session == WarmSpec(
        turn_max_steps=7, turn_max_tokens=9000, turn_deadline_s=90.0, idle_timeout_s=600.0
    )
    assert (payload.limits.max_tokens, payload.limits.deadline_s) == (50_000, 7200.0)
    assert payload.limits.remaining_depth == base.limits.remaining_depth


def test_the_trigger_section_defaults_are_the_warm_specs_defaults() -> None:
    section = TriggerSection(server="s", uri="u", instruction="i")
    spec = WarmSpec()
    assert (section.turn_max_steps, section.turn_max_tokens, section.turn_deadline) == (
        spec.turn_max_steps,
        spec.turn_max_tokens,
        spec.turn_deadline_s,
    )
    assert section.session_idle_timeout == spec.idle_timeout_s
