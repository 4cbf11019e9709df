"""Who can arm the chaos tests' fault hook (`subagent/faults.py`): only the daemon's environment."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from agentd.spawning.spawner import SpawnRequest, child_environment
from protocol.api import TaskSpec
from protocol.environment import TEST_FAULT_ENV
from subagent.faults import armed

REQUEST = SpawnRequest(task_id="t_1", run_id="r_1", handle="0")


def test_the_daemons_own_environment_passes_the_fault_on_to_a_child() -> None:
    env = child_environment(REQUEST, {TEST_FAULT_ENV: "segfault", "SECRET": "x"})
    assert env[TEST_FAULT_ENV] == "segfault"
    assert "SECRET" not in env  # everything else stays behind the allow-list


def test_without_it_in_the_daemons_environment_no_child_has_it() -> None:
    assert TEST_FAULT_ENV not in child_environment(REQUEST, {"PATH": "/usr/bin"})


def test_a_client_cannot_put_an_environment_in_a_task_spec() -> None:
    with pytest.raises(ValidationError, match="Extra inputs are not permitted"):
        TaskSpec.model_validate({"instruction": "x", "env": {TEST_FAULT_ENV: "segfault"}})


@pytest.mark.parametrize(
    ("value", "handle", "expected"),
    [
        pytest.param("segfault", "0", "segfault", id="every-node"),
        pytest.param("wedge-loop@0.1", "0.1", "wedge-loop", id="this-node"),
        pytest.param("wedge-loop@0.1", "0", None, id="another-node"),
        pytest.param("rm -rf /", "0", None, id="unknown-fault"),
        pytest.param("", "0", None, id="empty"),
    ],
)
def test_only_a_known_fault_for_this_node_is_armed(value: str, handle: str, expected: str | None) -> None:
    assert armed(handle, {TEST_FAULT_ENV: value}) == expected


def test_nothing_is_armed_by_default() -> None:
    assert armed("0", {}) is None
