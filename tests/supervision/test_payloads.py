"""Spawn payloads of a task's tree: the time a payload carries is what is left of its node's one
deadline; a nested child's payload is its parent's, narrowed to its grant."""

from __future__ import annotations

import pytest

from agentd.supervision.payloads import (
    MIN_DEADLINE_S,
    child_payload,
    scope_of,
    with_catalogues,
    with_deadline,
)
from agentd.supervision.tree import Budget, Grant
from protocol import control
from protocol.mcp_catalogue import CatalogueTool, McpCatalogue
from protocol.spawn import REVEAL_SECRETS, EndpointSpec, Limits, McpServerSpec, SpawnPayload

ROOT = SpawnPayload(
    task_id="t_1",
    run_id="r_1",
    instruction="the root's task",
    intelligence=[EndpointSpec(kind="openai", base_url="http://127.0.0.1:9/v1", model="m")],
    mcp_servers=[
        McpServerSpec(name="fs", transport="stdio", command=["fs-server"]),
        McpServerSpec(name="web", transport="http", url="http://127.0.0.1:9/mcp"),
    ],
    limits=Limits(max_steps=40, max_tokens=200_000, deadline_s=600.0, remaining_depth=3),
    notes_path="/var/lib/agentd/notes/t_1.md",
    warm=True,
)


@pytest.mark.parametrize(
    ("deadline", "now", "sent_s"),
    [
        pytest.param(700.0, 100.0, 600.0, id="all-of-it-at-admission"),
        pytest.param(700.0, 640.0, 60.0, id="what-is-left-later"),
        pytest.param(700.0, 699.95, MIN_DEADLINE_S, id="a-sliver-at-the-end"),
        pytest.param(700.0, 800.0, MIN_DEADLINE_S, id="a-sliver-past-it"),
    ],
)
def test_a_payload_is_sent_with_the_time_left_to_its_deadline(
    deadline: float, now: float, sent_s: float
) -> None:
    sent = with_deadline(ROOT, deadline, now=now)
    assert sent.limits.deadline_s == pytest.approx(sent_s)
    assert sent.limits.model_copy(update={"deadline_s": 600.0}) == ROOT.limits
    assert sent.model_copy(update={"limits": ROOT.limits}) == ROOT


def test_a_child_payload_is_its_parents_narrowed_to_its_grant() -> None:
    grant = Grant("0.2", 1, Budget(5, 20_000), deadline=400.0, scope={"fs": frozenset({"read_file"})})
    params = control.SpawnRequestParams(instruction="the child's task")
    child = child_payload(ROOT, grant, params, root_notes=ROOT.notes_path, now=250.0)
    assert (child.handle, child.depth, child.instruction) == ("0.2", 1, "the child's task")
    assert child.limits == Limits(max_steps=5, max_tokens=20_000, deadline_s=150.0, remaining_depth=2)
    assert [(s.name, s.tools) for s in child.mcp_servers] == [("fs", ["read_file"])]
    assert scope_of(child) == grant.scope
    assert child.notes_path == "/var/lib/agentd/notes/t_1-0.2.md"
    assert not child.warm
    assert child.intelligence == ROOT.intelligence


def test_a_child_without_root_notes_has_none() -> None:
    grant = Grant("0.1", 1, Budget(5, 20_000), deadline=400.0, scope={"web": None})
    params = control.SpawnRequestParams(instruction="look it up")
    child = child_payload(ROOT, grant, params, root_notes=None, now=0.0)
    assert child.notes_path is None
    assert [(s.name, s.tools) for s in child.mcp_servers] == [("web", None)]


@pytest.mark.parametrize(
    ("claimed", "expected"),
    [
        pytest.param(
            f"00-{'a' * 32}-{'b' * 16}-01", f"00-{'a' * 32}-{'b' * 16}-01", id="the-delegating-call"
        ),
        pytest.param(None, "parent", id="none-keeps-the-parents"),
        pytest.param("00-not-a-trace-context-01", "parent", id="a-malformed-claim-is-ignored"),
    ],
)
def test_a_child_is_traced_under_the_delegating_call(claimed: str | None, expected: str) -> None:
    parent_tp = f"00-{'1' * 32}-{'2' * 16}-01"
    parent = ROOT.model_copy(
        update={"telemetry": ROOT.telemetry.model_copy(update={"traceparent": parent_tp})}
    )
    grant = Grant("0.1", 1, Budget(5, 20_000), deadline=400.0, scope={})
    params = control.SpawnRequestParams(instruction="x", traceparent=claimed)
    child = child_payload(parent, grant, params, root_notes=None, now=0.0)
    assert child.telemetry.traceparent == (parent_tp if expected == "parent" else expected)
    assert child.telemetry.model_copy(update={"traceparent": parent_tp}) == parent.telemetry


HINT = McpCatalogue(has_tools=True, tools=[CatalogueTool(name="read_file")])


def test_a_payload_carries_the_known_catalogues_of_its_servers_at_most_a_few() -> None:
    assert with_catalogues(ROOT, lambda spec: None) == ROOT
    hinted = with_catalogues(ROOT, lambda spec: HINT if spec.name == "web" else None)
    assert hinted.mcp_catalogues == {"web": HINT}
    many = ROOT.model_copy(
        update={
            "mcp_servers": [McpServerSpec(name=f"s{i}", transport="stdio", command=["x"]) for i in range(6)]
        }
    )
    assert list(with_catalogues(many, lambda spec: HINT).mcp_catalogues) == ["s0", "s1", "s2", "s3"]
    SpawnPayload.model_validate(with_catalogues(many, lambda spec: HINT).model_dump(context=REVEAL_SECRETS))


def test_a_child_keeps_only_the_hints_of_the_servers_it_keeps() -> None:
    parent = with_catalogues(ROOT, lambda spec: HINT)
    grant = Grant("0.1", 1, Budget(5, 20_000), deadline=400.0, scope={"fs": None})
    child = child_payload(
        parent, grant, control.SpawnRequestParams(instruction="c"), root_notes=None, now=0.0
    )
    assert child.mcp_catalogues == {"fs": HINT}
    SpawnPayload.model_validate(child.model_dump(context=REVEAL_SECRETS))  # valid on the wire
