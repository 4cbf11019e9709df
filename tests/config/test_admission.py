"""`check_spec`: at submit, a spec the configuration cannot run is refused in the client's terms."""

from __future__ import annotations

from pathlib import Path

import pytest
from pydantic import JsonValue

from agentd.admission import SpecRejected, check_spec
from protocol.api import TaskSpec
from protocol.spawn import OutputContract
from tests.config.conftest import MINIMAL, Load


def _spec(schema: dict[str, JsonValue]) -> TaskSpec:
    return TaskSpec(instruction="x", output_contract=OutputContract(format="json", schema_=schema))


def test_a_spec_with_a_valid_output_schema_is_admitted(load: Load) -> None:
    check_spec(load(MINIMAL), _spec({"type": "object", "required": ["n"]}))


def test_a_spec_whose_output_schema_is_not_a_json_schema_is_refused_naming_why(load: Load) -> None:
    with pytest.raises(SpecRejected) as refused:
        check_spec(load(MINIMAL), _spec({"type": "no-such-type"}))
    assert str(refused.value).startswith("output_contract.schema is not a valid JSON Schema: ")
    assert "'no-such-type' is not valid" in str(refused.value)


GATED = (
    MINIMAL
    + """
[mcp.gh]
command = ["true"]
trust = []
approval = ["merge_*"]
approval_timeout = "15m"
[mcp.fs]
command = ["true"]
trust = []
"""
)


def test_the_operators_gate_and_a_clients_patterns_reach_the_root_payload(load: Load, tmp_path: Path) -> None:
    from agentd.journal.records import TaskRecord
    from agentd.root_payload import build_payload

    config = load(GATED + f'[daemon]\nstate_dir = "{tmp_path / "state"}"\n')
    spec = TaskSpec(instruction="x", mcp=["gh", "fs"], approve=["gh/close_*", "delete_*"])
    check_spec(config, spec)
    record = TaskRecord("t1", "r1", 0, None, spec, "queued", 0.0)
    servers = {s.name: s for s in build_payload(config, record).mcp_servers}
    assert servers["gh"].approval == ["merge_*", "close_*", "delete_*"]
    assert servers["gh"].approval_timeout_s == 900
    assert servers["fs"].approval == ["delete_*"]


@pytest.mark.parametrize(
    ("pattern", "why"),
    [
        pytest.param("web/post", "names no MCP server granted to this task (granted: gh, fs)", id="server"),
        pytest.param("gh/", "needs a server and a tool", id="no-tool"),
        pytest.param(" gh/x", "surrounding or control whitespace", id="space"),
    ],
)
def test_a_client_pattern_that_would_gate_nothing_is_refused(load: Load, pattern: str, why: str) -> None:
    with pytest.raises(SpecRejected, match="approve: ") as refused:
        check_spec(load(GATED), TaskSpec(instruction="x", mcp=["gh", "fs"], approve=[pattern]))
    assert why in str(refused.value)


def test_a_tasks_granted_deadline_is_read_without_its_secrets_or_a_payload(
    load: Load, tmp_path: Path
) -> None:
    from agentd.journal.records import TaskRecord
    from agentd.root_payload import build_payload, granted_deadline_s
    from agentd.supervision.task_payloads import PayloadError

    body = MINIMAL + 'api_key_env = "AGENTD_TEST_UNSET_KEY"\n[defaults]\ndeadline_ceiling = "1h"\n'
    config = load(body + f'[daemon]\nstate_dir = "{tmp_path / "state"}"\n', check_environment=False)
    asked = TaskRecord(
        "t1", "r1", 0, None, TaskSpec(instruction="x", limits={"deadline_s": 30}), "queued", 0.0
    )
    too_long = TaskRecord(
        "t2", "r2", 0, None, TaskSpec(instruction="x", limits={"deadline_s": 36000}), "queued", 0.0
    )
    assert granted_deadline_s(config, asked) == 30
    assert granted_deadline_s(config, too_long) == 3600
    assert not (tmp_path / "state" / "notes").exists()
    with pytest.raises(PayloadError, match="AGENTD_TEST_UNSET_KEY"):
        build_payload(config, asked)
