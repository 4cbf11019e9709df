"""The grounding re-ask's pure parts: which files an instruction names, which of them no tool
call has opened, and when a server's tool could open them."""

from __future__ import annotations

import pytest

from subagent.loop.grounding import named_files, offers_server_tools, reask, unopened
from subagent.messages import AssistantMessage, ToolCall, UserMessage


@pytest.mark.parametrize(
    ("instruction", "names"),
    [
        ("Read the file config.json in /srv/app and report its port.", ("config.json",)),
        ("Summarise /var/log/app/server.log, then `notes.md`.", ("server.log", "notes.md")),
        ('Compare "a1.txt" with (b2.txt): same size? Then a1.txt again.', ("a1.txt", "b2.txt")),
        ("Unpack release.tar.gz here.", ("release.tar.gz",)),
        ("Mail alice@example.com about https://example.com/page.html today.", ()),
        ("What is 3.14 times 2, e.g. roughly? Use v1.2 rules.", ()),
        ("How many files ending in .txt are in /tmp/work?", ()),
    ],
)
def test_the_files_an_instruction_names(instruction: str, names: tuple[str, ...]) -> None:
    assert named_files(instruction) == names


def call(arguments: dict[str, str]) -> AssistantMessage:
    return AssistantMessage("", (ToolCall("c1", "fs__read", dict(arguments), raw_arguments=str(arguments)),))


def test_a_named_file_counts_as_opened_once_a_call_names_it_in_its_arguments() -> None:
    head = (UserMessage("Read Config.json and notes.md and report them."),)
    listing = (call({"path": "/srv"}), UserMessage("[FILE] Config.json\n[FILE] notes.md", kind="observation"))
    # A listing that shows the name does not open the file.
    assert unopened(head, listing) == ("Config.json", "notes.md")
    assert unopened(head, (*listing, call({"path": "/srv/config.JSON"}))) == ("notes.md",)
    assert unopened(head, (call({"path": "/srv/config.json"}), call({"path": "notes.md"}))) == ()


def test_only_the_instruction_names_files_not_seeds_or_observations() -> None:
    head = (UserMessage("Say hello."), UserMessage("context: see data.csv", kind="seed"))
    assert unopened(head, (UserMessage("[agentd] about x.txt", kind="observation"),)) == ()


def test_only_a_servers_tool_can_open_a_file() -> None:
    assert offers_server_tools({"note_write", "fs__read_text_file"})
    assert not offers_server_tools({"note_write", "note_read", "subagent_spawn", "task_refuse"})


def test_the_reask_names_the_files_and_allows_the_same_answer_again() -> None:
    assert reask(("config.json",)).startswith("The task names `config.json`, but no tool call has opened it")
    assert "`a.txt`, `b.txt`" in reask(("a.txt", "b.txt")) and "opened them" in reask(("a.txt", "b.txt"))
    assert reask(("a.txt",)).endswith("if the task does not need it, give your answer again.")
