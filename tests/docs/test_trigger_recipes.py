"""docs/triggers.md's recipes work as written: the opening one fires a task from a fresh install
(the shared example server, the daemon on the recipe's `inbox.toml`, a post, the trigger's task
reading the inbox), then the command-line reference runs against that daemon (`on_arm = "skip"`:
resuming starts no task), and the configuration example validates."""

from __future__ import annotations

import json
import re
import socket
from pathlib import Path

import pytest

from tests.docs.shell import REPO, DocShell, blocks, doc_shell, section, shell_lines, until

pytestmark = pytest.mark.processes
TRIGGERS = REPO / "docs" / "triggers.md"
RECIPE = "## Try it: a trigger that fires"
DOC_PORT = "8765"
WATCHER_ARMS_S = 60.0  # a watcher imports `mcp` before it arms: seconds on a loaded machine


def _free_port() -> str:
    # The doc's port may be taken on a shared machine; the recipe is the same on any port.
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return str(sock.getsockname()[1])


def _save_files(text: str, where: Path, port: str) -> None:
    """Each block the prose says to save (`Save … as `NAME``), saved under that name."""
    for name, language in (("inbox.json", "json"), ("inbox.toml", "toml")):
        assert f"as `{name}`" in text, f"the recipe no longer says to save {name}"
        (block,) = blocks(text, language)
        (where / name).write_text(block.replace(DOC_PORT, port))


def _tasks(shell: DocShell) -> list[dict[str, object]]:
    done = shell.run([".venv/bin/agentd", "list", "--json"])
    assert done.returncode == 0, done.stderr
    return [json.loads(line) for line in done.stdout.splitlines()]


def _armed(shell: DocShell, words: list[str]) -> bool:
    done = shell.run(words)
    assert done.returncode == 0, done.stderr
    return bool(re.search(r"^inbox\s.*\barmed\b", done.stdout, flags=re.MULTILINE))


def test_the_opening_recipe_fires_a_task_and_the_cli_reference_runs(tmp_path: Path) -> None:
    text = section(TRIGGERS, RECIPE)
    port = _free_port()
    _save_files(text, tmp_path, port)
    (commands,) = blocks(text, "sh")
    server, serve, triggers, submit, listing = shell_lines(commands.replace(DOC_PORT, port))
    assert server.background and serve.background
    with doc_shell(tmp_path) as shell:
        shell.start(server.argv)
        daemon = shell.start(serve.argv)
        shell.wait_ready(daemon)
        until(lambda: _armed(shell, triggers.argv), "the trigger to be armed", WATCHER_ARMS_S)
        posted = shell.run(submit.argv)
        assert (posted.returncode, posted.stdout) == (0, "posted; the inbox has 1 message(s)\n"), (
            posted.stderr
        )
        fired = until(
            lambda: [t for t in _tasks(shell) if t["trigger"] == "inbox" and t["state"] == "terminal"],
            "the trigger's task",
        )
        assert isinstance(fired, list) and len(fired) == 1 and fired[0]["status"] == "completed"
        listed = shell.run(listing.argv)
        assert listed.returncode == 0 and 'The inbox changed: "notes://inbox"' in listed.stdout
        status = shell.run([".venv/bin/agentd", "status", str(fired[0]["task_id"])])
        # What the recipe says the task's status shows.
        for said in ("origin  trigger inbox notes://inbox", "The inbox reads: Post the build is green"):
            assert said in text, said
            assert re.sub(r" +", " ", said) in re.sub(r" +", " ", status.stdout), status.stdout

        reference = blocks(section(TRIGGERS, "## Command line and API (admins only)"), "sh")[0]
        for line in shell_lines(reference):
            words = ["inbox" if w == "NAME" else w for w in line.argv]
            done = shell.run(words)
            assert done.returncode == 0, f"{line.text}\n{done.stderr[-1500:]}"
        # `on_arm = "skip"`: the resume started no task (re-arming is tests/triggers' to prove).
        assert len(_tasks(shell)) == 2
        assert shell.stop(daemon) == 0, shell.log_of(daemon)


def test_the_configuration_example_validates(tmp_path: Path) -> None:
    (example,) = blocks(section(TRIGGERS, "## Configuration"), "toml")
    config = tmp_path / "agentd.toml"
    config.write_text(example)
    with doc_shell(tmp_path) as shell:
        done = shell.run([".venv/bin/agentd", "config", "validate", str(config)])
    assert done.returncode == 0, done.stderr
    assert "1 trigger(s)" in done.stdout
