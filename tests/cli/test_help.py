"""The help offers only commands that exist, and the socket's help gives the whole search order."""

from __future__ import annotations

import argparse
import re
from collections.abc import Iterator
from pathlib import Path

import pytest

from agentd.cli.main import build_parser

REPO = Path(__file__).resolve().parents[2]
# A command as help and messages quote it: `agentd config validate`, "agentd submit ...".
COMMAND = re.compile(r"`agentd ([a-z][a-z-]*)(?: ([a-z][a-z-]*))?")


def _subcommands(parser: argparse.ArgumentParser) -> dict[str, argparse.ArgumentParser]:
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            return dict(action.choices)
    return {}


def _help_texts(parser: argparse.ArgumentParser) -> Iterator[str]:
    yield parser.format_help()
    for sub in _subcommands(parser).values():
        yield from _help_texts(sub)


def _sources() -> Iterator[tuple[str, str]]:
    for text in _help_texts(build_parser()):
        yield "help", text.replace("\n", " ")
    for path in [*sorted((REPO / "agentd").rglob("*.py")), *sorted((REPO / "docs").glob("*.md"))]:
        yield str(path.relative_to(REPO)), path.read_text()
    yield "README.md", (REPO / "README.md").read_text()


def test_every_command_the_help_messages_and_docs_quote_exists() -> None:
    commands = _subcommands(build_parser())
    missing = []
    for where, text in _sources():
        for match in COMMAND.finditer(text):
            name, sub = match.groups()
            if name not in commands:
                missing.append(f"{where}: agentd {name}")
                continue
            below = _subcommands(commands[name])
            if below and sub is not None and sub not in below:
                missing.append(f"{where}: agentd {name} {sub}")
    assert missing == []


@pytest.mark.parametrize("group", ["config", "mcp"])
def test_a_command_groups_one_line_help_offers_no_subcommand_it_lacks(group: str) -> None:
    commands = _subcommands(build_parser())
    listing = build_parser().format_help()
    line = " ".join(listing.split(f"\n    {group}", 1)[1].split("\n    ", 1)[0].split())
    offered = set(re.findall(r"[a-z]+", line)) & {"validate", "describe", "show", "schema", "login", "logout"}
    assert offered <= set(_subcommands(commands[group])) | {"schema"}  # "its JSON Schema" is `schema`


def test_the_socket_flags_help_lists_every_place_a_client_looks(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("COLUMNS", "1000")  # one line: no path broken at its hyphen
    status = _subcommands(build_parser())["status"]
    text = " ".join(status.format_help().split())
    for place in (
        "--config FILE",
        "$AGENTD_SOCKET",
        "$AGENTD_CONFIG",
        "/etc/agentd/agentd.toml",
        "$RUNTIME_DIRECTORY/agentd.sock",
        "$XDG_RUNTIME_DIR/agentd/agentd.sock",
        "/tmp/agentd-UID/agentd.sock",
        "/run/agentd/agentd.sock",
    ):
        assert place in text, place
