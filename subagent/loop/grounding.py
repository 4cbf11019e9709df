"""A final answer about a file no tool call has opened (pure): the grounding re-ask.

A small model asked to report what a named file holds often answers from the file's name — after
listing its directory, or without any call — instead of reading it. When the instruction names a
file (a word like `config.json`), an MCP server's tool is offered, and the final answer comes
before any tool call's arguments named that file, the answer is re-asked once: open the file,
or give the answer again if the task does not need it. The second answer is taken as it is
(docs/loop.md "Grounding re-ask").
"""

from __future__ import annotations

import re
from collections.abc import Iterable

from subagent.messages import AssistantMessage, Message, UserMessage
from subagent.tools.naming import SEPARATOR

GROUNDING_REASKS = 1
# A file name: a stem of at least two characters, then an extension that starts with a letter
# (`config.json`, `main.c`, `app.tar.gz`; not `3.14`, `v1.2` or `e.g`).
_FILE_NAME = re.compile(r"[A-Za-z0-9_][\w-]+(?:\.[\w-]+)*\.[A-Za-z][A-Za-z0-9]{0,7}")
# What surrounds a word in prose: quotes, brackets, and a sentence's closing punctuation.
_WRAPPING = "\"'`()[]{}<>,;:!?."
# Most file names a task carries, a bound on the work (not a rule).
MAX_NAMES = 16


def named_files(instruction: str) -> tuple[str, ...]:
    """The file names `instruction` mentions, in order, each once (a path's last part; words of
    a URL or an e-mail address are not files)."""
    found: list[str] = []
    for word in instruction.split():
        word = word.strip(_WRAPPING)
        if "@" in word or "://" in word:
            continue
        name = word.rsplit("/", 1)[-1]
        if _FILE_NAME.fullmatch(name) and name not in found:
            found.append(name)
            if len(found) == MAX_NAMES:
                break
    return tuple(found)


def unopened(asked: Iterable[Message], transcript: Iterable[Message]) -> tuple[str, ...]:
    """The files the instruction (the user messages of `asked` that are instructions) names that
    no tool call's arguments in `transcript` mention."""
    instruction = "\n".join(m.text for m in asked if isinstance(m, UserMessage) and m.kind == "instruction")
    names = named_files(instruction)
    if not names:
        return ()
    arguments = " ".join(
        f"{call.raw_arguments} {call.arguments}".lower()
        for message in transcript
        if isinstance(message, AssistantMessage)
        for call in message.tool_calls
    )
    return tuple(name for name in names if name.lower() not in arguments)


def offers_server_tools(offered: Iterable[str]) -> bool:
    """Whether any offered tool is an MCP server's (its wire name is `server__tool`), the kind
    that can open a file; agentd's own tools (notes, subagents) cannot."""
    return any(SEPARATOR in name for name in offered)


def reask(names: tuple[str, ...]) -> str:
    """agentd's words to the model: which named files no call has opened, and what to do."""
    shown = ", ".join(f"`{name}`" for name in names)
    which = "it" if len(names) == 1 else "them"
    return (
        f"The task names {shown}, but no tool call has opened {which} yet, so this answer does not "
        f"come from {which}. Call the tool that reads {which} and answer from its result; if the "
        "task does not need it, give your answer again."
    )
