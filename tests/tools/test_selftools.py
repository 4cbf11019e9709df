"""The self-tools without servers: the notes file (lever 3) and `resource_read`'s choice of server."""

from __future__ import annotations

import os
import stat
from pathlib import Path

import mcp_types
import pytest

from subagent.messages import ToolOutcome
from subagent.tools.connection import Failure
from subagent.tools.selftools import (
    Notes,
    NoteWriteArgs,
    ResourceReadArgs,
    notes_path,
    read_resource,
)
from tests.tools.servers import make_payload

pytestmark = pytest.mark.anyio


async def test_notes_append_then_replace_then_read_back(tmp_path: Path) -> None:
    notes = Notes(tmp_path / "notes.md")
    assert await notes.read() == ToolOutcome("(no notes yet)")
    await notes.write(NoteWriteArgs(text="one"))
    await notes.write(NoteWriteArgs(text="two", mode="append"))
    assert (await notes.read()).text == "one\ntwo"
    await notes.write(NoteWriteArgs(text="fresh", mode="replace"))
    assert (await notes.read()).text == "fresh"


async def test_the_notes_file_is_private_to_its_owner(tmp_path: Path) -> None:
    path = tmp_path / "notes.md"
    await Notes(path).write(NoteWriteArgs(text="secret plan"))
    assert stat.S_IMODE(path.stat().st_mode) == 0o600


async def test_a_write_past_the_cap_is_refused_and_leaves_the_notes_intact(tmp_path: Path) -> None:
    notes = Notes(tmp_path / "notes.md", cap_bytes=10)
    await notes.write(NoteWriteArgs(text="12345"))
    refused = await notes.write(NoteWriteArgs(text="678901"))
    assert refused.is_error
    assert "over the 10-byte limit" in refused.text
    assert (await notes.read()).text == "12345"


async def test_notes_never_follow_a_planted_symlink(tmp_path: Path) -> None:
    target = tmp_path / "victim"
    target.write_text("untouched")
    (tmp_path / "notes.md").symlink_to(target)
    outcome = await Notes(tmp_path / "notes.md").write(NoteWriteArgs(text="x"))
    assert outcome.is_error
    assert target.read_text() == "untouched"


def test_notes_live_at_the_given_path_or_a_task_file_under_tmpdir(monkeypatch: pytest.MonkeyPatch) -> None:
    assert notes_path(make_payload(notes_path="/data/n.md")) == Path("/data/n.md")
    monkeypatch.setenv("TMPDIR", "/tmp")
    default = notes_path(make_payload(task_id="t/../x", run_id="r 1"))
    assert default.parent == Path(os.environ["TMPDIR"])
    assert default.name == "agentd-notes-t_.._x-r_1.md"


class FakeSource:
    """A server that lists some URIs and answers reads from a dict (missing → a protocol failure)."""

    def __init__(self, name: str, bodies: dict[str, str], listed: bool = True) -> None:
        self.name = name
        self.bodies = bodies
        self.listed = listed
        self.reads: list[str] = []

    def lists(self, uri: str) -> bool:
        return self.listed and uri in self.bodies

    async def read(self, uri: str) -> mcp_types.ReadResourceResult | Failure:
        self.reads.append(uri)
        if uri not in self.bodies:
            return Failure("protocol", f"protocol error -32602: Unknown resource: {uri}")
        return mcp_types.ReadResourceResult(
            contents=[mcp_types.TextResourceContents(uri=uri, text=self.bodies[uri])]
        )


async def test_resource_read_asks_only_the_server_that_listed_the_uri() -> None:
    a, b = FakeSource("a", {"x://1": "from a"}), FakeSource("b", {"x://1": "from b", "x://2": "b2"})
    outcome = await read_resource(ResourceReadArgs(uri="x://2"), [a, b])
    assert outcome == ToolOutcome("b2")
    assert a.reads == []


async def test_resource_read_honours_a_named_server() -> None:
    a, b = FakeSource("a", {"x://1": "from a"}), FakeSource("b", {"x://1": "from b"})
    assert (await read_resource(ResourceReadArgs(uri="x://1", server="b"), [a, b])).text == "from b"
    unknown = await read_resource(ResourceReadArgs(uri="x://1", server="c"), [a, b])
    assert unknown.is_error


async def test_an_unlisted_uri_is_tried_on_every_server_and_each_failure_reported() -> None:
    a, b = FakeSource("a", {}), FakeSource("b", {"tmpl://7": "seven"}, listed=False)
    assert (await read_resource(ResourceReadArgs(uri="tmpl://7"), [a, b])).text == "seven"
    missing = await read_resource(ResourceReadArgs(uri="tmpl://8"), [a, b])
    assert missing.is_error
    assert missing.text == (
        "resource `tmpl://8` could not be read (a: protocol error -32602: Unknown resource: tmpl://8; "
        "b: protocol error -32602: Unknown resource: tmpl://8)"
    )


async def test_resource_read_without_any_resource_server_is_an_observation() -> None:
    outcome = await read_resource(ResourceReadArgs(uri="x://1"), [])
    assert outcome == ToolOutcome("no connected server serves resources", is_error=True)
