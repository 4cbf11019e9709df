"""`python -m mcp_serve --socket PATH`: serve MCP on stdio for the daemon at PATH.

`agentd mcp serve` resolves the socket as every client command does and execs this; run by hand,
`--socket` is required.
"""

from __future__ import annotations

import argparse
import importlib.metadata
import sys
from collections.abc import Sequence

import anyio

from mcp_serve.daemon_port import DaemonPort
from mcp_serve.inside import inside_a_task
from mcp_serve.server import build_server, serve_stdio


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="agentd mcp serve", description="agentd as an MCP server on stdio")
    parser.add_argument("--socket", metavar="PATH", required=True, help="the daemon's socket")
    args = parser.parse_args(argv)
    try:
        version = importlib.metadata.version("agentd")
    except importlib.metadata.PackageNotFoundError:
        version = ""
    server = build_server(DaemonPort(args.socket), inside_task=inside_a_task(), version=version)
    try:
        anyio.run(serve_stdio, server)
    except KeyboardInterrupt:
        return 130
    return 0


if __name__ == "__main__":
    sys.exit(main())
