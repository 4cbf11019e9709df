"""`agentd web`: the dashboard in a browser (docs/web.md).

The dashboard is an HTTP server, which the daemon's code may not import (docs/architecture.md):
this module resolves the socket as every client command does, then execs `python -m dashboard`
in its place, so no second process stays behind and Ctrl-C reaches the server.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Sequence

from protocol.exit_codes import ExitCode

SERVER = [sys.executable, "-I", "-m", "dashboard"]


def web_flags(listen: str, no_open: bool, allow_remote: bool) -> list[str]:
    """The server's flags, as typed (the server checks them and names the flag it refuses)."""
    flags = ["--listen", listen]
    flags += ["--no-open"] if no_open else []
    return [*flags, "--allow-remote"] if allow_remote else flags


def cmd_web(socket: str, flags: Sequence[str] = ()) -> int:
    """Become the dashboard for the daemon at `socket` (returns only if the exec fails)."""
    argv = [*SERVER, "--socket", socket, *flags]
    try:
        os.execv(argv[0], argv)
    except OSError as exc:
        sys.stderr.write(f"agentd web: cannot start the server ({argv[0]}): {exc.strerror}\n")
    return ExitCode.FAILURE
