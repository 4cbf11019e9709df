"""The configuration's defaults and the option objects' defaults are the same numbers: the embedded
defaults map onto exactly what each component assumes when built without a configuration."""

from __future__ import annotations

from pathlib import Path

import pytest

from agentd.api.limits import ApiLimits
from agentd.config.load import ConfigError, load_config
from agentd.daemon import api_limits
from agentd.journal.store import JournalOptions
from agentd.options import journal_options, supervisor_options
from agentd.supervision.liveness import LivenessPolicy
from agentd.supervision.ports import RunOptions
from agentd.supervision.supervisor import SupervisorOptions
from processes.ladder import LadderPolicy


def test_the_embedded_defaults_are_the_components_defaults(tmp_path: Path) -> None:
    config = load_config(environ={"HOME": str(tmp_path)})
    options = supervisor_options(config)
    assert options.run.liveness == LivenessPolicy()
    assert options.run.ladder == LadderPolicy()
    defaults = SupervisorOptions()
    assert (options.max_concurrent_tasks, options.drain_timeout_s, options.orphan_sweep_interval_s) == (
        defaults.max_concurrent_tasks,
        defaults.drain_timeout_s,
        defaults.orphan_sweep_interval_s,
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
