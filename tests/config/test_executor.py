"""The `[executor]` table: local by default, a Temporal target checked for shape, and a clear
problem when `kind = "temporal"` lacks the SDK (docs/temporal.md)."""

from __future__ import annotations

import importlib.util

import pytest

from agentd.options import temporal_settings
from tests.config.conftest import Load, Problems


def test_the_default_executor_is_local(load: Load) -> None:
    assert load("").file.executor.kind == "local"


def test_a_temporal_executor_maps_to_its_settings(load: Load) -> None:
    config = load(
        '[executor]\nkind = "temporal"\ntarget = "temporal.internal:7233"\nnamespace = "agents"\n'
        'task_queue = "q"\nconnect_timeout_s = "3s"\nheartbeat_timeout_s = "20s"\n'
    )
    settings = temporal_settings(config)
    assert (settings.target, settings.namespace, settings.task_queue) == (
        "temporal.internal:7233",
        "agents",
        "q",
    )
    assert (settings.connect_timeout_s, settings.heartbeat_timeout_s) == (3.0, 20.0)


@pytest.mark.parametrize(
    ("text", "key", "fragment"),
    [
        pytest.param('[executor]\nkind = "k8s"\n', "executor.kind", "'local' or 'temporal'", id="kind"),
        pytest.param('[executor]\ntarget = "no-port"\n', "executor.target", "HOST:PORT", id="target"),
        pytest.param('[executor]\ntarget = "h:99999"\n', "executor.target", "HOST:PORT", id="port"),
        pytest.param(
            '[executor]\nheartbeat_timeout_s = "0.1s"\n', "executor.heartbeat_timeout_s", "1", id="hb"
        ),
        pytest.param('[executor]\nqueue = "x"\n', "executor.queue", "", id="unknown"),
    ],
)
def test_a_bad_executor_key_is_reported_under_its_name(
    problems: Problems, text: str, key: str, fragment: str
) -> None:
    found = problems(text)
    assert any(p.key == key and fragment in p.message for p in found), found


def test_kind_temporal_without_the_sdk_says_which_extra_to_install(
    problems: Problems, monkeypatch: pytest.MonkeyPatch
) -> None:
    real = importlib.util.find_spec
    monkeypatch.setattr(
        importlib.util, "find_spec", lambda name, *a: None if name == "temporalio" else real(name, *a)
    )
    found = problems('[executor]\nkind = "temporal"\n')
    assert [(p.key, p.message) for p in found if p.key.startswith("executor")] == [
        ("executor.kind", "temporal needs the temporalio SDK: install agentd[temporal]")
    ]
