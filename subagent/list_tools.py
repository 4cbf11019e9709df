"""`agentd config validate`'s helper: connect to MCP servers and report the tools each lists.

The daemon's code may not import `mcp`, so the CLI runs `python -m subagent.list_tools --spec-fd
N` with the servers' grants (a JSON list of `McpServerSpec`, secrets included, never on a command
line) on descriptor N. Every server is connected concurrently, each within its own
`connect_timeout_s`, and stopped as a run stops it. Stdout gets one JSON object: for each server
`{"tools": [names]}`, or `{"error": why}` when it could not be reached.

Exit status: 0 (whatever the servers did), 2 bad input.
"""

from __future__ import annotations

import argparse
import json
import os
import sys

import anyio
from pydantic import JsonValue, TypeAdapter, ValidationError

from protocol.spawn import LoopKnobs, McpServerSpec
from subagent.telemetry import discard_events
from subagent.tools.connection import ServerLink

MAX_SPECS_BYTES = 4 * 1024 * 1024
_SPECS = TypeAdapter(list[McpServerSpec])


async def list_tools(specs: list[McpServerSpec]) -> dict[str, JsonValue]:
    """Each server's tool names, or why it could not be reached."""
    found: dict[str, JsonValue] = {}
    links = [ServerLink(spec, LoopKnobs(), sink=discard_events, on_change=lambda: None) for spec in specs]

    async def one(link: ServerLink) -> None:
        error = await link.connect()
        tools: list[JsonValue] = [tool.name for tool in link.listing.tools]
        found[link.name] = {"error": error} if error is not None else {"tools": tools}

    async with anyio.create_task_group() as owners:
        for link in links:
            owners.start_soon(link.run)
        async with anyio.create_task_group() as connects:
            for link in links:
                connects.start_soon(one, link)
        owners.cancel_scope.cancel()  # each link's owner retires its connection (stdio: the ladder)
    return found


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m subagent.list_tools")
    parser.add_argument("--spec-fd", type=int, required=True, help="descriptor holding the specs' JSON")
    args = parser.parse_args(argv)
    try:
        with os.fdopen(args.spec_fd, "rb") as f:
            raw = f.read(MAX_SPECS_BYTES + 1)
        if len(raw) > MAX_SPECS_BYTES:
            raise ValueError(f"over {MAX_SPECS_BYTES} bytes")
        specs = _SPECS.validate_json(raw)
    except (OSError, ValueError, ValidationError) as exc:
        print(f"unreadable server specs: {type(exc).__name__}: {exc}", file=sys.stderr)
        return 2
    found = anyio.run(list_tools, specs)
    sys.stdout.write(json.dumps(found) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
