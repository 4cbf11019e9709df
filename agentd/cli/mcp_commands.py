"""`agentd mcp login NAME`: the operator's one-time OAuth login for an `authorization_code` server.

A daemon cannot ask a person to approve anything, so a server whose authorization server offers
only the authorization-code grant (the common shape of hosted MCP servers) needs this step once,
run as the daemon's user: it prints an authorization URL to open in a browser and stores the
tokens in the state directory, where every task's subagent then finds and refreshes them.

The daemon's code may not import `mcp` (docs/architecture.md), so the flow runs in a helper
process, `python -m subagent.oauth_login`: this module reads the configuration, makes the private
token directory, and hands the helper the server's grant on a pipe (secrets included, never on a
command line), with the terminal left to the helper for the URL and a pasted redirect.
"""

from __future__ import annotations

import os
import subprocess
import sys
from typing import TextIO

from agentd.config.load import load_config
from agentd.config.servers import TOKEN_DIR_NAME
from agentd.errors import AgentdError, ConfigError
from agentd.private_dirs import open_private_dir
from protocol.exit_codes import ExitCode
from protocol.spawn import REVEAL_SECRETS

HELPER = [sys.executable, "-I", "-m", "subagent.oauth_login"]
# Beyond the helper's own --timeout: its start-up (importing the SDK) and its goodbye.
HELPER_GRACE_S = 60.0


def cmd_login(
    name: str,
    *,
    config_path: str | None,
    state_dir: str | None,
    paste: bool,
    timeout_s: float,
    err: TextIO,
) -> int:
    """Log in to the MCP server `name`; the helper talks to the terminal. Returns the exit code."""
    try:
        config = load_config(config_path, state_dir=state_dir)
        server = config.mcp.get(name)
        if server is None:
            known = ", ".join(sorted(config.mcp)) or "none"
            err.write(f"agentd: no MCP server named {name!r} (configured: {known})\n")
            return ExitCode.USAGE
        if server.section.oauth_flow != "authorization_code" or server.section.effective_transport == "stdio":
            err.write(
                f'agentd: mcp.{name} does not use oauth_flow = "authorization_code"; only such an HTTP '
                'server needs a login (docs/configuration.md, "A remote server behind a one-time login")\n'
            )
            return ExitCode.USAGE
        for directory in (config.state_dir, config.state_dir / TOKEN_DIR_NAME):
            os.close(open_private_dir(directory, owners={os.geteuid()}))
        spec = config.mcp_spec(name)
    except ConfigError as exc:
        err.write(f"agentd: invalid configuration ({exc.source}):\n")
        for problem in exc.problems:
            err.write(f"  {problem}\n")
        return ExitCode.USAGE
    except AgentdError as exc:
        err.write(f"agentd: {exc}\n")
        return ExitCode.USAGE
    assert spec.oauth_login is not None  # oauth_flow is authorization_code and the state dir is known
    err.write(f"agentd: the login will be stored in {spec.oauth_login.token_file}\n")
    body = spec.model_dump_json(context=REVEAL_SECRETS).encode()
    read_fd, write_fd = os.pipe()
    try:
        argv = [*HELPER, "--spec-fd", str(read_fd), "--timeout", f"{timeout_s:g}"]
        if paste:
            argv.append("--paste")
        helper = subprocess.Popen(argv, pass_fds=(read_fd,))
    except OSError as exc:
        os.close(write_fd)
        err.write(f"agentd: cannot start the login helper: {exc}\n")
        return ExitCode.FAILURE
    finally:
        os.close(read_fd)
    with os.fdopen(write_fd, "wb") as pipe:
        try:
            pipe.write(body)
        except BrokenPipeError:
            pass  # the helper exited already; its status says why
    try:
        return helper.wait(timeout=timeout_s + HELPER_GRACE_S)
    except subprocess.TimeoutExpired:
        helper.kill()
        helper.wait()
        err.write(f"agentd: the login helper did not finish within {timeout_s + HELPER_GRACE_S:g} s\n")
        return ExitCode.FAILURE
    except KeyboardInterrupt:
        helper.terminate()
        helper.wait()
        return ExitCode.FAILURE
