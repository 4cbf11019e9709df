"""Client commands against a running daemon: the table of commands, where the socket is, and
what every command shares — task ids a person may shorten (`agentd.cli.task_ids`), and errors
as one line on stderr with exit 2 (usage) or 1. A command runs without the models when
`plain_commands` can answer it (`agentd status`, a plain `list` or `submit`); the others are in
`task_commands` (one task), `listing_commands` (lists), `resume_commands`, `approval_commands`.
This module imports no model: only a command that needs them does.
"""

from __future__ import annotations

import argparse
import importlib
import os
import stat
import sys
from pathlib import Path
from typing import TextIO

from agentd.api.client import ApiClient
from agentd.cli.flag_errors import spec_problem
from agentd.cli.plain_commands import Runner, plain_runner
from agentd.cli.task_ids import resolve
from agentd.errors import ApiClientError, UsageError
from protocol.envelope import IDEMPOTENCY_CONFLICT, INVALID_PARAMS, INVALID_SPEC
from protocol.exit_codes import ExitCode


def resolve_socket(flag: str | None, config: str | None = None) -> Path:
    """--socket; the `daemon.socket` of `config` (--config, which must be readable); $AGENTD_SOCKET;
    the `daemon.socket` of the search order's file (if readable); the per-user socket if it
    exists, the system socket if it exists, else the per-user path.

    Raises:
        UsageError: `config` cannot be read.
    """
    from agentd.config import paths as config_paths

    configured = None
    if flag is None and config is not None:
        configured = _configured_socket(Path(config), required=True)
        if configured is not None:
            return Path(configured)
    elif flag is None and "AGENTD_SOCKET" not in os.environ:
        located = config_paths.locate_config(None, os.environ)
        if located.path is not None:
            configured = _configured_socket(located.path, required=False)
    return config_paths.client_socket_path(os.environ, configured, flag, is_socket=_is_socket)


def _is_socket(path: Path) -> bool:
    try:
        return stat.S_ISSOCK(path.stat().st_mode)
    except PermissionError:
        # A directory on the way we may not search (the system socket's, before its group is
        # ours): connecting there names the socket and says how to get access.
        return path.parent.is_dir()
    except OSError:
        return False  # absent


def _configured_socket(path: Path, *, required: bool) -> str | None:
    """The file's `daemon.socket` (relative to the file's directory, as the daemon reads it)."""
    import tomllib

    try:
        data = tomllib.loads(path.read_text())
    except (OSError, ValueError) as exc:
        if required:
            why = getattr(exc, "strerror", None) or str(exc)
            raise UsageError(f"--config {path}: cannot read the socket from it: {why}") from None
        return None
    daemon = data.get("daemon")
    socket = daemon.get("socket") if isinstance(daemon, dict) else None
    if not isinstance(socket, str) or not socket:
        return None
    return str(path.absolute().parent / os.path.expanduser(socket))


# Each command as (module, function): a command imports its own module only, so `agentd status`
# does not pay for building the models of schedules, approvals and transcripts it never reads.
COMMANDS: dict[str, tuple[str, str]] = {
    "submit": ("task_commands", "cmd_submit"),
    "status": ("task_commands", "cmd_status"),
    "cancel": ("task_commands", "cmd_cancel"),
    "list": ("listing_commands", "cmd_list"),
    "logs": ("task_commands", "cmd_logs"),
    "tree": ("task_commands", "cmd_tree"),
    "transcript": ("resume_commands", "cmd_transcript"),
    "fork": ("resume_commands", "cmd_fork"),
    "extend": ("resume_commands", "cmd_extend"),
    "schedules": ("listing_commands", "cmd_schedules"),
    "approvals": ("approval_commands", "cmd_approvals"),
    "approve": ("approval_commands", "cmd_decide"),
    "deny": ("approval_commands", "cmd_decide"),
    "triggers": ("listing_commands", "cmd_triggers"),
    "budgets": ("budget_commands", "cmd_budgets"),
}


def command_function(command: str) -> Runner:
    """The function that runs `command` with the models, its module imported now."""
    module_name, function = COMMANDS[command]
    module = importlib.import_module(f"agentd.cli.{module_name}")
    run: Runner = getattr(module, function)
    return run


def model_runner(command: str, args: argparse.Namespace) -> Runner:
    """`command` on the model path: its flags checked (a bad value is a UsageError naming the
    flag), and a value the method's params refuse (`--limit 0`) reported the same way."""
    from pydantic import ValidationError

    from agentd.cli.flag_errors import flag_problem
    from agentd.cli.flags import PREFLIGHT

    preflight = PREFLIGHT.get(command)
    if preflight is not None:
        preflight(args)
    run = command_function(command)

    def checked(client: ApiClient, args: argparse.Namespace, out: TextIO) -> int:
        try:
            return run(client, args, out)
        except ValidationError as exc:
            raise UsageError(flag_problem(exc, {})) from None

    return checked


# The arguments that name a task, as the person typed them: any unique start of an id will do.
TASK_ARGUMENTS = {"task": "TASK", "before": "--before"}


def resolve_task_arguments(client: ApiClient, args: argparse.Namespace) -> None:
    """Replace each task argument given as a short id by the whole id it names."""
    for attribute, name in TASK_ARGUMENTS.items():
        value = getattr(args, attribute, None)
        if isinstance(value, str):
            setattr(args, attribute, resolve(client, value, name=name))


def dispatch(command: str, args: argparse.Namespace) -> int:
    try:
        run = plain_runner(command, args) or model_runner(command, args)
        path = resolve_socket(args.socket)
        with ApiClient(path) as client:
            resolve_task_arguments(client, args)
            return run(client, args, sys.stdout)
    except UsageError as exc:
        sys.stderr.write(f"agentd {command}: {exc}\n")
        return ExitCode.USAGE
    except ApiClientError as exc:
        text = spec_problem(str(exc)) if exc.code == INVALID_SPEC else str(exc)
        sys.stderr.write(f"agentd {command}: {text}\n")
        return (
            ExitCode.USAGE
            if exc.code in (INVALID_PARAMS, INVALID_SPEC, IDEMPOTENCY_CONFLICT)
            else ExitCode.FAILURE
        )
    except KeyboardInterrupt:
        return ExitCode.INTERRUPTED
