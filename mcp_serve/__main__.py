"""`python -m mcp_serve --socket PATH [--http HOST:PORT …]`: serve MCP for the daemon at PATH, on
stdio or over streamable HTTP.

`agentd mcp serve` resolves the socket as every client command does and execs this; run by hand,
`--socket` is required. A bad flag is one line naming it, exit status 2.
"""

from __future__ import annotations

import argparse
import importlib.metadata
import sys
from collections.abc import Sequence
from functools import partial
from pathlib import Path

import anyio
from mcp.server import Server

from agentd.api.async_port import DaemonPort
from mcp_serve.access import AccessError, parse_listen
from mcp_serve.inside import inside_a_task
from mcp_serve.server import Served, build_server, serve_stdio
from mcp_serve.token_file import default_path, open_token

USAGE_ERROR = 2


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="agentd mcp serve", description="agentd as an MCP server")
    parser.add_argument("--socket", metavar="PATH", required=True, help="the daemon's socket")
    parser.add_argument("--http", metavar="HOST:PORT", help="serve streamable HTTP here instead of stdio")
    parser.add_argument("--token-file", metavar="FILE", help="the bearer token (made when missing)")
    parser.add_argument("--allow-remote", action="store_true", help="let --http listen beyond loopback")
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    try:
        version = importlib.metadata.version("agentd")
    except importlib.metadata.PackageNotFoundError:
        version = ""
    server = build_server(DaemonPort(args.socket), inside_task=inside_a_task(), version=version)
    try:
        if args.http is None:
            if args.token_file or args.allow_remote:
                sys.stderr.write("agentd mcp serve: --token-file and --allow-remote go with --http\n")
                return USAGE_ERROR
            anyio.run(serve_stdio, server)
        else:
            return _serve_http(server, args)
    except KeyboardInterrupt:
        return 130
    return 0


def _serve_http(server: Server[Served], args: argparse.Namespace) -> int:
    from agentd.api.listen_address import bind
    from mcp_serve.http import serve_http  # uvicorn and starlette: only when serving HTTP

    try:
        listen = parse_listen(args.http, allow_remote=args.allow_remote)
        path = Path(args.token_file) if args.token_file else default_path()
        token = open_token(path)
    except AccessError as exc:
        sys.stderr.write(f"agentd mcp serve: {exc}\n")
        return USAGE_ERROR
    try:
        sock = bind(listen)
    except OSError as exc:
        sys.stderr.write(f"agentd mcp serve: --http {args.http}: cannot listen there: {exc.strerror}\n")
        return USAGE_ERROR
    if token.created:
        # Shown this once; afterwards it is in the file only.
        sys.stderr.write(f"agentd mcp serve: made a bearer token in {path} (mode 600): {token.value}\n")
    anyio.run(partial(serve_http, server, listen, sock, token.value, remote=args.allow_remote))
    return 0


if __name__ == "__main__":
    sys.exit(main())
