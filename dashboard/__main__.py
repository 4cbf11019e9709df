"""`python -m dashboard --socket PATH [--listen HOST:PORT] [--no-open] [--allow-remote]`: the
dashboard of the daemon at PATH.

`agentd web` resolves the socket as every client command does and execs this. It prints one URL
carrying a one-time token; a bad flag is one line naming it, exit status 2.
"""

from __future__ import annotations

import argparse
import secrets
import sys
import webbrowser
from collections.abc import Sequence
from functools import partial

import anyio

from agentd.api.async_port import DaemonPort
from agentd.api.listen_address import bind
from dashboard.access import Keys, Origins, parse_listen
from dashboard.app import build_app
from dashboard.errors import AccessError
from dashboard.fanout import TaskStreams
from dashboard.server import configured, serve

USAGE_ERROR = 2
DEFAULT_LISTEN = "127.0.0.1:8765"


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="agentd web", description="agentd's dashboard in a browser")
    parser.add_argument("--socket", metavar="PATH", required=True, help="the daemon's socket")
    parser.add_argument("--listen", metavar="HOST:PORT", default=DEFAULT_LISTEN, help="where to listen")
    parser.add_argument("--no-open", action="store_true", help="print the URL; do not open a browser")
    parser.add_argument(
        "--allow-remote", action="store_true", help="let --listen name a non-loopback address"
    )
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    try:
        listen = parse_listen(args.listen, allow_remote=args.allow_remote)
    except AccessError as exc:
        sys.stderr.write(f"agentd web: {exc}\n")
        return USAGE_ERROR
    try:
        sock = bind(listen)
    except OSError as exc:
        sys.stderr.write(f"agentd web: --listen {args.listen}: cannot listen there: {exc.strerror}\n")
        return USAGE_ERROR
    port = sock.getsockname()[1]
    keys = Keys(launch_token=secrets.token_urlsafe(32))
    daemon = DaemonPort(args.socket)
    streams = TaskStreams(daemon)
    app = build_app(daemon, keys, Origins(listen, port, remote=args.allow_remote), streams)
    config = configured(app)
    url = f"http://{listen.url_host}:{port}/?token={keys.launch_token}"
    sys.stdout.write(url + "\n")
    sys.stdout.flush()
    if not args.no_open:
        webbrowser.open(url)
    try:
        anyio.run(partial(serve, config, sock, streams))
    except KeyboardInterrupt:
        return 130
    return 0


if __name__ == "__main__":
    sys.exit(main())
