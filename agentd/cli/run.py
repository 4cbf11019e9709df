"""`agentd run`: one task, no daemon — an embedded supervisor with the same spawning and supervision.

Flags become configuration overrides validated exactly like a file (a bad flag is exit 2, in
milliseconds, before any process starts). The journal lives in a private temporary directory
that is removed afterwards. The result goes to stdout (JSON when structured), JSON logs to
stderr, and the exit code is the task's (docs/design.md §12). Ctrl-C cancels the task; a second Ctrl-C
kills it.
"""

from __future__ import annotations

import argparse
import os
import shlex
import shutil
import signal
import sys
import tempfile

import anyio
from pydantic import TypeAdapter, ValidationError

from agentd import logs
from agentd.admission import SpecRejected, check_spec
from agentd.cli.flag_errors import spec_problem
from agentd.cli.flags import UsageError, spec_from_args
from agentd.cli.outcome import outcome_line
from agentd.cli.plain_commands import print_result
from agentd.config.file import AgentdFile
from agentd.config.load import Config, ConfigError, default_model, load_config, merge_tables
from agentd.journal.store import open_journal
from agentd.options import journal_options, supervisor_options
from agentd.root_payload import build_payload
from agentd.spawning.spawner import ExecSpawner
from agentd.supervision.supervisor import Supervisor
from processes.linux import set_child_subreaper
from protocol.api import TaskSpec, TaskView
from protocol.exit_codes import ExitCode
from protocol.names import Name

CLI_ENDPOINT = "cli"
_NAME: TypeAdapter[str] = TypeAdapter(Name)
NAME_WORDS = "letters, digits, '_', '.' and '-', starting with a letter or digit (at most 64)"


def endpoint_table(flag: str, model: str | None, api_key_env: str | None) -> dict[str, object]:
    """The [intelligence.cli] table for `--intelligence`."""
    table: dict[str, object]
    if flag.startswith("scripted:"):
        table = {"kind": "scripted", "script": os.path.abspath(flag.removeprefix("scripted:"))}
    elif flag.startswith("anthropic:"):
        table = {"kind": "anthropic", "base_url": flag.removeprefix("anthropic:")}
    elif flag.startswith(("http://", "https://")):
        table = {"kind": "openai", "base_url": flag}
    else:
        raise UsageError(f"--intelligence {flag!r}: expected http(s)://…, anthropic:URL or scripted:FILE")
    if model:
        table["model"] = model
    if api_key_env:
        table["api_key_env"] = api_key_env
    return table


MCP_FORMS = (
    "expected NAME=COMMAND ARGS... (a stdio server), NAME=http(s)://URL, or the NAME of a configured server"
)


def mcp_flag(item: str) -> tuple[str, dict[str, object] | None]:
    """`NAME=COMMAND ARGS…` / `NAME=URL` → (name, table); a bare `NAME` refers to the config."""
    if "=" not in item:
        if not is_name(item):
            raise UsageError(f"--mcp {item!r}: {MCP_FORMS}")
        return item, None
    name, _, target = item.partition("=")
    if not name or not target:
        raise UsageError(f"--mcp {item!r}: {MCP_FORMS}")
    if not is_name(name):
        raise UsageError(f"--mcp {item!r}: the NAME before '=' must use {NAME_WORDS}")
    if target.startswith(("http://", "https://")):
        return name, {"url": target}
    try:
        argv = shlex.split(target)
    except ValueError as exc:
        raise UsageError(f"--mcp {name}: cannot split the command: {exc}") from None
    return name, {"command": argv}


def is_name(text: str) -> bool:
    """Whether `text` can name an MCP server or an endpoint."""
    try:
        _NAME.validate_python(text)
    except ValidationError:
        return False
    return True


def build_overrides(args: argparse.Namespace) -> tuple[dict[str, object], str | None, list[str]]:
    overrides: dict[str, object] = {}
    model = args.model
    if args.intelligence:
        endpoint = endpoint_table(args.intelligence, args.model, args.api_key_env)
        if endpoint["kind"] != "scripted" and not args.model:
            raise UsageError(
                f"--intelligence {args.intelligence} needs --model NAME: the model to ask the endpoint "
                "for (for example --model gpt-4.1-mini, or --model llama3.1 for Ollama)"
            )
        overrides["intelligence"] = {CLI_ENDPOINT: endpoint}
        model = CLI_ENDPOINT
    elif args.api_key_env:
        raise UsageError("--api-key-env needs --intelligence")
    servers: dict[str, object] = {}
    names: list[str] = []
    for item in args.mcp:
        name, table = mcp_flag(item)
        if table is not None:
            servers[name] = table
        names.append(name)
    if servers:
        overrides["mcp"] = servers
    daemon: dict[str, object] = {}
    if args.log_content:
        daemon["log_content"] = True
    level = "debug" if args.verbose else args.log_level
    if level is not None:
        daemon["log_level"] = level
    if daemon:
        overrides["daemon"] = daemon
    return overrides, model, names


def load_run_config(
    args: argparse.Namespace, state_dir: str, overrides: dict[str, object], model: str | None
) -> Config:
    """The configuration `agentd run` uses, read and checked once: the file, the flags'
    overrides, `--tool-mode` on every endpoint (the task's endpoint and its fallbacks must share a
    tool mode), and `--stream`/`--context-window` on the endpoints the run may use — which only
    the file names, so those are merged over the validated file (`refine`).

    Raises:
        ConfigError: the configuration, with the overrides, is invalid.
    """
    flags = endpoint_flags(args)

    def refine(file: AgentdFile) -> dict[str, object]:
        tables: dict[str, object] = {}
        if args.tool_mode is not None:
            tables = {"intelligence": {name: {"tool_mode": args.tool_mode} for name in file.intelligence}}
        if flags:
            tables = with_endpoint_flags(file, tables, model, flags)
        return tables

    return load_config(args.config, state_dir=state_dir, overrides=overrides, refine=refine)


def endpoint_flags(args: argparse.Namespace) -> dict[str, object]:
    """The endpoint keys `--stream` and `--context-window` set."""
    table: dict[str, object] = {}
    if args.stream:
        table["stream"] = True
    if args.context_window is not None:
        table["context_window"] = args.context_window
    return table


def with_endpoint_flags(
    file: AgentdFile, overrides: dict[str, object], model: str | None, flags: dict[str, object]
) -> dict[str, object]:
    """`overrides` plus `flags` on every endpoint the run may use: its model and that model's fallbacks.

    An unknown model name is left alone here: the spec check reports it.
    """
    if not file.intelligence:
        return overrides
    chosen = default_model(file) if model is None else model
    section = file.intelligence.get(chosen)
    if section is None:
        return overrides
    tables = {name: dict(flags) for name in (chosen, *section.fallback)}
    return merge_tables(overrides, {"intelligence": tables})


# Keys of an endpoint that `agentd run`'s flags set on every endpoint of the run's chain.
_ENDPOINT_FLAGS = {"tool_mode": "--tool-mode", "stream": "--stream", "context_window": "--context-window"}
# Keys of the endpoint `--intelligence` declares, by the flag that wrote them.
_CLI_ENDPOINT_FLAGS = {"model": "--model", "api_key_env": "--api-key-env"}


def flag_of(key: str, args: argparse.Namespace) -> str | None:
    """The `agentd run` flag a configuration key's value came from; None for the file's own."""
    parts = key.split(".")
    if parts[0] == "intelligence" and len(parts) >= 3:
        field = parts[2].split("[")[0]
        if field in _ENDPOINT_FLAGS and getattr(args, field, None) not in (None, False):
            return _ENDPOINT_FLAGS[field]
        if parts[1] == CLI_ENDPOINT and args.intelligence:
            return _CLI_ENDPOINT_FLAGS.get(field, f"--intelligence {args.intelligence}")
        return None
    if parts[0] == "mcp" and len(parts) >= 2:
        typed = next((item for item in args.mcp if item.partition("=")[0] == parts[1] and "=" in item), None)
        return f"--mcp {typed}" if typed is not None else None
    if key == "daemon.log_level" and (args.log_level or args.verbose):
        return "--log-level"
    return None


def config_error_text(exc: ConfigError, args: argparse.Namespace) -> str:
    """What `agentd run` prints for an invalid configuration: each problem a flag caused under
    that flag, the file's own under the file's name."""
    lines = []
    from_file = []
    for problem in exc.problems:
        flag = flag_of(problem.key, args)
        if flag is None:
            from_file.append(problem)
        else:
            lines.append(f"agentd run: {flag}: {problem.message}\n")
    if from_file:
        lines.append(f"agentd run: invalid configuration ({exc.source}):\n")
        lines += [f"  {problem}\n" for problem in from_file]
    return "".join(lines)


async def run_embedded(config: Config, spec: TaskSpec) -> TaskView:
    """Run one task under an in-process supervisor and return its final view."""
    set_child_subreaper()
    async with open_journal(config.state_dir, journal_options(config)) as journal:
        # No socket: nobody could approve a gated call, so it is denied at once (docs/security.md).
        supervisor = Supervisor(
            journal,
            lambda record: build_payload(config, record),
            ExecSpawner(),
            supervisor_options(config),
            approvals=False,
        )
        record, _ = await journal.tasks.submit(spec, os.getuid())
        done = supervisor.terminal_event(record.task_id)

        async def interrupts() -> None:
            with anyio.open_signal_receiver(signal.SIGINT, signal.SIGTERM) as received:
                count = 0
                async for _ in received:
                    count += 1
                    if count == 1:
                        await supervisor.cancel(record.task_id, "interrupted")
                    else:
                        supervisor.drain(force=True)

        async with anyio.create_task_group() as tg:
            tg.start_soon(supervisor.serve)
            tg.start_soon(interrupts)
            await done.wait()
            supervisor.drain()
            await supervisor.wait_drained()
            tg.cancel_scope.cancel()
        final = await journal.tasks.get(record.task_id)
    assert final is not None
    return final.to_view()


def cmd_run(args: argparse.Namespace) -> int:
    state_dir = tempfile.mkdtemp(prefix="agentd-run-")
    try:
        try:
            overrides, model, names = build_overrides(args)
            config = load_run_config(args, state_dir, overrides, model)
            logs.configure(config.daemon.log_level)
            spec = spec_from_args(args, model=model, mcp=names)
            check_spec(config, spec)
        except UsageError as exc:
            sys.stderr.write(f"agentd run: {exc}\n")
            return ExitCode.USAGE
        except SpecRejected as exc:
            text = spec_problem(str(exc))
            if text.startswith("--mcp: no MCP server named"):
                text += "; to start one for this run, give --mcp NAME=COMMAND ARGS..."
            sys.stderr.write(f"agentd run: {text}\n")
            return ExitCode.USAGE
        except ConfigError as exc:
            sys.stderr.write(config_error_text(exc, args))
            return ExitCode.USAGE
        view = anyio.run(run_embedded, config, spec)
    finally:
        shutil.rmtree(state_dir, ignore_errors=True)
    print_result(view, sys.stdout)
    sys.stdout.flush()
    line = outcome_line("run", view)
    if line is not None:
        sys.stderr.write(line + "\n")
    return view.exit_code if view.exit_code is not None else 1
