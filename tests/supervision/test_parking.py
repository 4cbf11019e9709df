"""What a prestarted child may hold (agentd/supervision/parking.py): the pure checks."""

from __future__ import annotations

from agentd.supervision.parking import preparable, same_task
from protocol.mcp_catalogue import McpCatalogue
from protocol.spawn import EndpointSpec, Limits, McpServerSpec, SpawnPayload, Telemetry


def _payload(**update: object) -> SpawnPayload:
    base = SpawnPayload(
        task_id="t_1",
        run_id="r_1",
        instruction="changed: watch://a",
        intelligence=[EndpointSpec(kind="openai", base_url="http://127.0.0.1:1/v1", model="m")],
        mcp_servers=[McpServerSpec(name="files", transport="stdio", command=["x"])],
    )
    return base.model_copy(update=update)


def test_the_run_takes_a_child_holding_its_task_whatever_go_carries() -> None:
    held = _payload(hold_s=32.0, telemetry=Telemetry(traceparent="00-" + "1" * 32 + "-" + "2" * 16 + "-01"))
    # `ctrl/go` brings the instruction (a newer etag) and the deadline left; the trace differs.
    real = _payload(instruction="changed: watch://a (etag 2)", limits=Limits(deadline_s=12.0))
    assert same_task(held, real)


def test_a_payload_changed_by_a_reload_is_not_the_held_one() -> None:
    held = _payload(hold_s=32.0)
    other_model = _payload(
        intelligence=[EndpointSpec(kind="openai", base_url="http://127.0.0.1:2/v1", model="m")]
    )
    assert not same_task(held, other_model)
    assert not same_task(held, _payload(mcp_servers=[]))
    assert not same_task(held, _payload(task_id="t_2"))


def test_only_a_payload_whose_every_server_is_hinted_can_be_prepared() -> None:
    catalogue = McpCatalogue()
    assert preparable(_payload(mcp_servers=[]))
    assert not preparable(_payload())  # `files` would have to be connected, i.e. started
    assert preparable(_payload(mcp_catalogues={"files": catalogue}))
