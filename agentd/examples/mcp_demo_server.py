"""A small MCP server for the agentd demo, written with the official `mcp` SDK (stdio).

It serves a read-only "field notes" library: resources you can list and read, and tools that
search and measure them. `agentd demo` grants it to a scripted task; point any MCP client at it
with `python agentd/examples/mcp_demo_server.py`. Shipped as package data (never imported by
agentd), so an installed agentd runs it too.
"""

from __future__ import annotations

import re

from mcp.server.mcpserver import MCPServer
from mcp.server.mcpserver.exceptions import ToolError

NOTES = {
    "readme": (
        "agentd runs each AI agent task as its own supervised process. A supervisor that never talks "
        "to the model enforces budgets, liveness and the kill ladder, and records exactly one terminal "
        "status per task, so you always know why a run ended."
    ),
    "ladder": (
        "The kill ladder: ask the child to cancel, wait five seconds, send SIGTERM to its process "
        "group, wait two seconds, send SIGKILL, then reap it through its pidfd."
    ),
    "budgets": (
        "Every task has a step budget, a token budget and a deadline. Nested subagents share a tree "
        "budget: a child's grant is a reservation against its parent's remaining budget."
    ),
}

server = MCPServer("field-notes", version="1.0.0", instructions="Read-only field notes about agentd.")


def _note(name: str) -> str:
    try:
        return NOTES[name]
    except KeyError:
        raise ToolError(f"no note named {name!r}; available: {', '.join(sorted(NOTES))}") from None


@server.resource("notes://readme", name="readme", description="What agentd is, in three sentences.")
def readme() -> str:
    return NOTES["readme"]


@server.resource("notes://ladder", name="ladder", description="How agentd stops a child process.")
def ladder() -> str:
    return NOTES["ladder"]


@server.resource("notes://budgets", name="budgets", description="Step, token and deadline budgets.")
def budgets() -> str:
    return NOTES["budgets"]


@server.tool()
def word_count(text: str) -> int:
    """Count the words in `text`."""
    return len(re.findall(r"\b[\w'-]+\b", text))


@server.tool()
def search_notes(term: str) -> list[str]:
    """Names of the notes that mention `term` (case-insensitive)."""
    needle = term.lower()
    return sorted(name for name, text in NOTES.items() if needle in text.lower())


@server.tool()
def read_note(name: str) -> str:
    """The full text of the note `name`."""
    return _note(name)


if __name__ == "__main__":
    server.run("stdio")
