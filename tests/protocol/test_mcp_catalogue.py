"""The catalogue hint's contract: bounded as a whole, named only for granted servers, and a
hostile `ev/catalogue` frame is a clear decode error, never an exception."""

from __future__ import annotations

import json

import pytest
from pydantic import ValidationError

from protocol.framing import FrameError, decode
from protocol.mcp_catalogue import (
    MAX_CATALOGUE_BYTES,
    MAX_PAYLOAD_CATALOGUES,
    CatalogueResource,
    CatalogueTool,
    McpCatalogue,
    catalogue_bytes,
)
from protocol.spawn import SpawnPayload
from protocol.watch import WATCH_UP_ADAPTER, CatalogueParams, CatalogueReport

SMALL = McpCatalogue(
    has_tools=True,
    tools=[CatalogueTool(name="note", description="Append a note.", input_schema={"type": "object"})],
    has_resources=True,
    resources=[CatalogueResource(uri="watch://item/0", name="0", mime_type="text/plain")],
)


def payload(servers: list[str], catalogues: dict[str, object]) -> dict[str, object]:
    return {
        "task_id": "t_1",
        "run_id": "r_1",
        "instruction": "x",
        "intelligence": [{"kind": "scripted", "script_path": "/dev/null"}],
        "mcp_servers": [{"name": s, "transport": "stdio", "command": ["srv"]} for s in servers],
        "mcp_catalogues": catalogues,
    }


def test_a_catalogue_over_its_byte_bound_is_refused_whole() -> None:
    description = "d" * 60_000  # each within its field's bound; together past the catalogue's
    tools = [{"name": f"t{i}", "description": description} for i in range(MAX_CATALOGUE_BYTES // 60_000 + 1)]
    with pytest.raises(ValidationError, match=f"a catalogue is at most {MAX_CATALOGUE_BYTES} bytes"):
        McpCatalogue.model_validate({"has_tools": True, "tools": tools})
    assert catalogue_bytes(SMALL) == len(SMALL.model_dump_json()) < 1000


def test_a_payload_carries_catalogues_only_for_granted_servers_and_only_a_few() -> None:
    hint = SMALL.model_dump()
    assert SpawnPayload.model_validate(payload(["a"], {"a": hint})).mcp_catalogues == {"a": SMALL}
    with pytest.raises(ValidationError, match="mcp_catalogues names servers that are not granted: b"):
        SpawnPayload.model_validate(payload(["a"], {"b": hint}))
    names = [f"s{i}" for i in range(MAX_PAYLOAD_CATALOGUES + 1)]
    with pytest.raises(ValidationError, match="at most 4 items"):
        SpawnPayload.model_validate(payload(names, dict.fromkeys(names, hint)))


def test_an_ev_catalogue_frame_round_trips() -> None:
    frame = CatalogueReport(params=CatalogueParams(catalogue=SMALL))
    decoded = decode(frame.model_dump_json().encode(), WATCH_UP_ADAPTER)
    assert decoded == frame
    none = CatalogueReport(params=CatalogueParams(detail="the catalogue is not sent: too large"))
    assert decode(none.model_dump_json().encode(), WATCH_UP_ADAPTER) == none


@pytest.mark.parametrize(
    "params",
    [
        pytest.param({"catalogue": {"tools": [{"name": ""}]}}, id="empty-tool-name"),
        pytest.param({"catalogue": {"tools": [{"name": "x" * 600}]}}, id="tool-name-too-long"),
        pytest.param({"catalogue": {"tools": "all"}}, id="tools-not-a-list"),
        pytest.param({"catalogue": {"resources": [{"uri": "u", "size": -1}]}}, id="negative-size"),
        pytest.param({"catalogue": {"tools": [], "extra": 1}}, id="unknown-field"),
        pytest.param(
            {"catalogue": {"tools": [{"name": f"t{i}", "description": "d" * 60_000} for i in range(20)]}},
            id="oversize",
        ),
    ],
)
def test_a_hostile_ev_catalogue_frame_is_a_decode_error(params: dict[str, object]) -> None:
    line = json.dumps({"jsonrpc": "2.0", "method": "ev/catalogue", "params": params}).encode()
    decoded = decode(line, WATCH_UP_ADAPTER)
    assert isinstance(decoded, FrameError)
