"""docs/scripted-model.md's examples as written (its command and file-format example are run by
tests/cli/test_doc_examples.py): the endpoint it opens with is a valid endpoint naming a script
that ships, and the roles example plays a parent and its subagent in one `agentd run`."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from protocol.spawn import EndpointSpec
from tests.docs.shell import REPO, blocks, doc_shell, section

DOC = REPO / "docs" / "scripted-model.md"


def test_the_opening_endpoint_is_valid_and_its_script_ships() -> None:
    endpoint = EndpointSpec.model_validate(json.loads(blocks(DOC.read_text(), "json")[0]))
    assert endpoint.kind == "scripted" and endpoint.script_path is not None
    assert (REPO / endpoint.script_path).is_file()


@pytest.mark.processes
def test_the_roles_example_plays_the_parent_and_its_child(tmp_path: Path) -> None:
    (script,) = blocks(section(DOC, "### Roles: one script for a parent and its subagents"), "json")
    (tmp_path / "roles.json").write_text(script)
    with doc_shell(tmp_path) as shell:
        done = shell.run(
            [".venv/bin/agentd", "run", "Add 2 and 3 with a child", "--intelligence", "scripted:roles.json"]
        )
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.startswith("The child said: ")
    assert json.loads(done.stdout.removeprefix("The child said: "))["result"] == "5"
