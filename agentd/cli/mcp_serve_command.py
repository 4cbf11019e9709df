"""`agentd mcp serve`: agentd as an MCP server on stdio (or `--http`), and `--print-config` for
each client.

The server speaks MCP, which the daemon's code may not import (docs/architecture.md): this module
resolves the socket as every client command does, then execs `python -m mcp_serve` in its place,
so the client's stdin and stdout reach the server and no second process stays behind. The client
configuration snippets are pure JSON built here.
"""

from __future__ import annotations

import json
import os
import shutil
import sys
from collections.abc import Sequence
from typing import TextIO

from protocol.exit_codes import ExitCode

SERVER = [sys.executable, "-I", "-m", "mcp_serve"]
CLIENTS = ("claude", "cursor", "vscode")
SERVER_NAME = "agentd"


def launch_command(socket: str | None) -> list[str]:
    """The command a client runs to start the server: this install's `agentd mcp serve`."""
    agentd = shutil.which("agentd")
    base = [agentd] if agentd else [sys.executable, "-m", "agentd"]
    return [*base, "mcp", "serve", *(["--socket", socket] if socket else [])]


def client_config(client: str, command: Sequence[str]) -> dict[str, object]:
    """The JSON to merge into `client`'s MCP configuration (docs/mcp-server.md)."""
    entry: dict[str, object] = {"command": command[0], "args": list(command[1:])}
    if client == "vscode":
        return {"servers": {SERVER_NAME: {"type": "stdio", **entry}}}
    return {"mcpServers": {SERVER_NAME: entry}}


def cmd_print_config(client: str, socket: str | None, out: TextIO) -> int:
    out.write(json.dumps(client_config(client, launch_command(socket)), indent=2) + "\n")
    return ExitCode.OK


def http_flags(http: str | None, token_file: str | None, allow_remote: bool) -> list[str]:
    """The server's flags for streamable HTTP, as typed (the server checks them and names the
    flag it refuses)."""
    flags = ["--http", http] if http is not None else []
    flags += ["--token-file", token_file] if token_file is not None else []
    return [*flags, "--allow-remote"] if allow_remote else flags


def cmd_serve(socket: str, flags: Sequence[str] = ()) -> int:
    """Become the MCP server for the daemon at `socket` (returns only if the exec fails)."""
    argv = [*SERVER, "--socket", socket, *flags]
    try:
        os.execv(argv[0], argv)
    except OSError as exc:
        sys.stderr.write(f"agentd mcp serve: cannot start the server ({argv[0]}): {exc.strerror}\n")
    return ExitCode.FAILURE
