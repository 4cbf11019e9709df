"""The `agentd` command line: argument parsing and dispatch.

Client commands talk to a running daemon over its socket (`agentd.cli.client_commands`); `agentd run`
runs one task with an embedded supervisor (`agentd.cli.run`); `agentd serve` is the daemon;
`agentd config` validates and shows the configuration and prints its schema. Usage errors exit 2 before any
side effect. Heavy modules are imported only by the command that needs them.

Output whose reader went away (`agentd list | head -1`) ends any command here, once: quietly,
with exit 0, as if the rest had been read (docs/decisions.md, "A closed pipe ends a command").
"""

from __future__ import annotations

import argparse
import os
import select
import sys
from collections.abc import Sequence

TASK_HELP = "task id, or any unique start of one (the short id `agentd list` shows)"

EPILOG = """\
exit codes (run, submit --wait): 0 completed, 1 failed/crashed, 2 usage or config error,
3 partial result, 4 model unreachable, 5 refused, 6 required MCP server down, 7 budget
exhausted without a result, 124 deadline; 130 Ctrl-C while submit waits or follows (the task
goes on). See docs/exit-codes.md.
"""


SOCKET_SEARCH = (
    "the daemon's socket; without it, the first that applies: daemon.socket in the --config FILE; "
    "$AGENTD_SOCKET; daemon.socket in the first file of $AGENTD_CONFIG, "
    "$XDG_CONFIG_HOME/agentd/agentd.toml (~/.config/agentd/agentd.toml), /etc/agentd/agentd.toml; "
    "your own daemon's socket if one is there ($RUNTIME_DIRECTORY/agentd.sock, "
    "$XDG_RUNTIME_DIR/agentd/agentd.sock, else /tmp/agentd-UID/agentd.sock; root: "
    "/run/agentd/agentd.sock); the system service's /run/agentd/agentd.sock if one is there; else "
    "your own daemon's path"
)


def _socket_arg(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--socket", metavar="PATH", help=SOCKET_SEARCH)
    parser.add_argument(
        "--config",
        metavar="FILE",
        help="a daemon's configuration file: connect to the socket it names (daemon.socket)",
    )


def _json_arg(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--json", action="store_true", help="print machine-readable JSON")


def _limits_args(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--max-steps", type=int, metavar="N", help="model turns the task may take")
    parser.add_argument("--max-tokens", type=int, metavar="N", help="tokens the task may spend")
    parser.add_argument(
        "--max-cost",
        type=float,
        metavar="USD",
        help="what the whole task tree may spend in USD, e.g. 2.50 (needs priced endpoints)",
    )
    parser.add_argument("--deadline", metavar="DURATION", help="wall-clock limit: 30s, 5m, 2h or seconds")
    parser.add_argument(
        "--output-schema",
        metavar="FILE",
        help="JSON Schema the result must satisfy (the result is then JSON)",
    )


def _run_model_args(parser: argparse.ArgumentParser) -> None:
    """`agentd run`'s endpoint and logging switches (they override the configuration)."""
    parser.add_argument(
        "--stream",
        action="store_true",
        default=None,
        help="stream the model's replies (server-sent events) from the run's endpoints",
    )
    parser.add_argument(
        "--context-window",
        type=int,
        metavar="N",
        help="the model's context window in tokens (default 128000; drives compaction)",
    )
    level = parser.add_mutually_exclusive_group()
    level.add_argument(
        "-v",
        "--verbose",
        action="store_true",
        help="log at debug level: every model call and reply, tool call and step",
    )
    level.add_argument(
        "--log-level",
        choices=["debug", "info", "warning", "error"],
        help="log level on stderr (default: the config's daemon.log_level, info)",
    )


def _schedule_args(parser: argparse.ArgumentParser) -> None:
    group = parser.add_argument_group("recurring (a schedule instead of one task; see docs/schedules.md)")
    when = group.add_mutually_exclusive_group()
    when.add_argument("--cron", metavar="EXPR", help='5-field cron expression, e.g. "0 7 * * 1-5"')
    when.add_argument("--every", metavar="DURATION", help="fire every DURATION (1s or more): 30s, 15m, 2h")
    when.add_argument("--loop", action="store_true", help="run again after each run ends")
    group.add_argument("--tz", metavar="ZONE", help="IANA time zone of --cron (default UTC)")
    group.add_argument("--interval", metavar="DURATION", help="--loop: pause between runs (default 0)")
    group.add_argument("--max-runs", type=int, metavar="N", help="end the schedule after N fires")
    group.add_argument(
        "--missed",
        choices=["skip", "catch_up_one"],
        help="a fire missed while the daemon was down: skip it (default) or run it once",
    )
    group.add_argument(
        "--overlap",
        choices=["skip", "allow"],
        help="a fire due while the previous one runs: skip it (default, recorded) or allow",
    )
    group.add_argument("--max-failures", type=int, metavar="K", help="crashed runs in a row that end it (3)")
    group.add_argument(
        "--max-total-tokens", type=int, metavar="N", help="tokens all fires may spend; then it pauses"
    )
    group.add_argument(
        "--daily-cost", type=float, metavar="USD", help="USD its fires may spend a day; later fires wait"
    )


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="agentd",
        description="Run AI agent tasks as supervised, budgeted OS processes.",
        epilog=EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    p = sub.add_parser("serve", help="run the daemon")
    p.add_argument("--config", metavar="FILE", help="configuration file (default: search order, see docs)")
    p.add_argument("--socket", metavar="PATH", help="socket to listen on")
    p.add_argument("--state-dir", metavar="DIR", help="where the journal lives")
    p.add_argument(
        "--log-content",
        action="store_true",
        help="log prompts, replies and tool payloads (default: lengths and hashes only)",
    )
    p.add_argument(
        "--log-format",
        choices=["json", "text"],
        help="log lines on stderr: json (one object a line, for journald and log shippers) or text "
        "(`ts level event key=value`); default: text when stderr is a terminal, else json",
    )

    p = sub.add_parser("worker", help="run tasks for a front door, on Temporal (docs/temporal.md)")
    p.add_argument("--config", metavar="FILE", help="configuration file: the front door's, kind = temporal")
    p.add_argument("--state-dir", metavar="DIR", help="where this worker's own journal lives")

    p = sub.add_parser(
        "submit",
        help="submit a task to the daemon",
        epilog=EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("instruction", help="what the agent should do")
    _socket_arg(p)
    p.add_argument("--model", metavar="NAME", help="intelligence endpoint name from the daemon's config")
    p.add_argument(
        "--mcp",
        metavar="NAME",
        action="append",
        default=[],
        help="MCP server name from the daemon's config (repeatable)",
    )
    _limits_args(p)
    p.add_argument(
        "--idempotency-key", metavar="KEY", help="retrying with the same key returns the same task"
    )
    p.add_argument(
        "--approve",
        metavar="TOOL_GLOB",
        action="append",
        default=[],
        help="tool calls that wait for your approval, added to the daemon's (SERVER/TOOL_GLOB, or "
        "TOOL_GLOB on every granted server; repeatable)",
    )
    p.add_argument(
        "--on-budget",
        choices=["end", "pause"],
        help="when the step or token budget runs out: end the task exhausted_* (the default), or pause "
        "it until `agentd extend TASK` raises the budget",
    )
    mode = p.add_mutually_exclusive_group()
    mode.add_argument("--wait", action="store_true", help="wait for the result and exit with the task's code")
    mode.add_argument(
        "--follow",
        action="store_true",
        help="print the task id, then its progress live, then the result (Ctrl-C stops following; the "
        "task goes on)",
    )
    _json_arg(p)
    _schedule_args(p)

    for name, text in (
        ("status", "show one task"),
        ("cancel", "cancel a task"),
        ("tree", "show a task's tree"),
    ):
        p = sub.add_parser(name, help=text)
        p.add_argument("task", metavar="TASK", help=TASK_HELP)
        _socket_arg(p)
        _json_arg(p)
    p = sub.add_parser(
        "list",
        help="list your tasks (all tasks for admins), newest first, a page at a time",
        description="One line per task: its short id (any unique start of a task id is accepted "
        "wherever a task id is), age, state, model and the start of its instruction, fitted to the "
        "terminal's width (`agentd status TASK` shows it whole; --json prints each task as JSON, the "
        "instruction cut to 200 characters, no result). Pages: pass the last task id as --before.",
    )
    p.add_argument("--state", choices=["queued", "starting", "running", "terminal"])
    p.add_argument("--limit", type=int, default=50, help="tasks per page (1 to 1000; default 50)")
    p.add_argument("--before", metavar="TASK", help="only tasks submitted before TASK (the next page)")
    p.add_argument("--schedule", metavar="ID", help="only the fires of schedule ID")
    p.add_argument("--trigger", metavar="NAME", help="only the deliveries of reactive trigger NAME")
    _socket_arg(p)
    _json_arg(p)
    p = sub.add_parser(
        "schedules",
        help="list your schedules, or pause, resume or delete one",
        description="Without an action: every schedule of yours (all for admins) with its kind, "
        "expression, next fire, last run and state. `show ID` prints one (with --json: as JSON).",
    )
    p.add_argument("action", nargs="?", choices=["show", "pause", "resume", "delete"])
    p.add_argument("schedule", nargs="?", metavar="ID")
    _socket_arg(p)
    _json_arg(p)
    p = sub.add_parser(
        "approvals",
        help="list the pending tool-call approval requests you may decide",
        description="Each line: task, call id, tool, arguments, age. You see the requests of your own "
        "tasks (admins: all).",
    )
    p.add_argument("task", nargs="?", metavar="TASK", help="only this task's requests (id or its start)")
    _socket_arg(p)
    _json_arg(p)
    for name, text in (("approve", "let a waiting tool call run"), ("deny", "refuse a waiting tool call")):
        p = sub.add_parser(name, help=text)
        p.add_argument("task", metavar="TASK", help=TASK_HELP)
        p.add_argument("call", nargs="?", metavar="CALL", help="the request (needed when several wait)")
        if name == "deny":
            p.add_argument("--reason", metavar="TEXT", help="told to the model")
        _socket_arg(p)
        _json_arg(p)
    p = sub.add_parser(
        "triggers",
        help="list the reactive triggers, or pause, resume or restart one (admins only)",
        description="Without an action: every [[trigger]] of the configuration with its server, URI or "
        "glob, route, state (starting, armed, unsupported, backoff, failed, paused), deliveries, tasks "
        "started, last fire and last error. `pause NAME`: changes are no longer delivered (kept across "
        "restarts); `resume NAME`: delivered again, starting with one 'possibly changed' per URI; "
        "`restart NAME`: restart the trigger's watcher now and forget its restart count (what brings a "
        "`failed` trigger back). See docs/triggers.md.",
    )
    p.add_argument("action", nargs="?", choices=["pause", "resume", "restart"])
    p.add_argument("name", nargs="?", metavar="NAME", help="the trigger's name")
    _socket_arg(p)
    _json_arg(p)
    p = sub.add_parser(
        "budgets",
        help="today's spend against the daily caps, and the tasks they defer",
        description="Each daily cap's day: what was spent (USD and tokens), the cap and when the day "
        "ends; then the tasks deferred to a cap's next day, and why. You see your own; an admin sees "
        "every user's, every trigger's and every schedule's. See docs/budgets.md.",
    )
    _socket_arg(p)
    _json_arg(p)
    p = sub.add_parser(
        "transcript",
        help="show what a task's model was asked and answered, and its tool calls with their results",
        description="Prints the instruction, every model reply, every tool call with its arguments "
        "and every tool result, as journaled (docs/durability.md). Bodies are cut unless --full. "
        "The same rule as `status`: your own tasks (admins: all).",
    )
    p.add_argument("task", metavar="TASK", help=TASK_HELP)
    p.add_argument(
        "--node", default="0", metavar="HANDLE", help="a nested subagent's handle (default 0, the root)"
    )
    p.add_argument("--full", action="store_true", help="print long bodies whole")
    p.add_argument("-f", "--follow", action="store_true", help="keep printing new steps until the task ends")
    _socket_arg(p)
    _json_arg(p)
    p = sub.add_parser(
        "fork",
        help="start a new task from a copy of a task's first N steps",
        description="The new task has TASK's servers and budgets; its run replays the first N model "
        "steps of TASK (each with its tool calls and results: nothing is asked or run again) and goes "
        "on from there, on another model or with another instruction if given (docs/durability.md).",
    )
    p.add_argument("task", metavar="TASK", help="the task to fork (its id, or any unique start of it)")
    p.add_argument("--from-step", type=int, required=True, metavar="N", help="how many of its steps to keep")
    p.add_argument("--model", metavar="NAME", help="a configured endpoint for the new task")
    p.add_argument("--instruction", metavar="TEXT", help="a new instruction for the new task")
    p.add_argument("--idempotency-key", metavar="KEY", help="the same key returns the same fork")
    _socket_arg(p)
    _json_arg(p)
    p = sub.add_parser(
        "extend",
        help="raise the budget of a task that waits for it (awaiting_budget) so it goes on",
        description="Each amount is added to what the task had (within the daemon's ceilings); the task "
        "resumes from its last journaled step (docs/durability.md).",
    )
    p.add_argument("task", metavar="TASK", help="a task in awaiting_budget (id or its start)")
    p.add_argument("--steps", type=int, metavar="N", help="more model turns")
    p.add_argument("--tokens", type=int, metavar="N", help="more tokens")
    p.add_argument("--deadline", metavar="DURATION", help="more wall-clock time: 30s, 5m, 2h or seconds")
    _socket_arg(p)
    _json_arg(p)
    p = sub.add_parser("logs", help="show a task's events")
    p.add_argument("task", metavar="TASK", help=TASK_HELP)
    p.add_argument("-f", "--follow", action="store_true", help="keep showing new events until the task ends")
    _socket_arg(p)
    _json_arg(p)

    p = sub.add_parser(
        "top",
        help="a live view of your running tasks as trees (JSON snapshot when piped)",
        description="Refreshes every --interval seconds; q or Ctrl-C quits. Admins see every task. "
        "When stdout is not a terminal (or with --json), prints one snapshot as JSON.",
    )
    p.add_argument("--interval", type=float, default=1.0, help="seconds between refreshes (default 1)")
    p.add_argument("--sort", choices=["age", "cpu", "tokens"], default="age", help="task order (default age)")
    _socket_arg(p)
    _json_arg(p)

    p = sub.add_parser(
        "run",
        help="run one task without a daemon (embedded supervisor)",
        epilog=EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("instruction", help="what the agent should do")
    p.add_argument("--config", metavar="FILE", help="configuration file (default: search order)")
    p.add_argument(
        "--intelligence",
        metavar="URL",
        help="OpenAI-compatible base URL (http://host:port/v1), anthropic:URL, or scripted:FILE",
    )
    p.add_argument("--model", metavar="NAME", help="model name (with --intelligence), else an endpoint name")
    p.add_argument("--api-key-env", metavar="VAR", help="environment variable holding the API key")
    p.add_argument(
        "--tool-mode",
        choices=("auto", "native", "json"),
        help="how the model calls tools: auto (native, switching to JSON actions when the endpoint "
        "has no usable tool calling; the default), native, or json",
    )
    p.add_argument(
        "--log-content",
        action="store_true",
        help="log prompts, replies and tool payloads (default: lengths and hashes only)",
    )
    p.add_argument(
        "--mcp",
        metavar="SPEC",
        action="append",
        default=[],
        help="NAME=COMMAND ARGS... (stdio, split like a shell), NAME=http(s)://URL, or a configured "
        "NAME (repeatable)",
    )
    _limits_args(p)
    _run_model_args(p)

    p = sub.add_parser("config", help="validate or show the configuration, or print its JSON Schema")
    csub = p.add_subparsers(dest="config_command", required=True, metavar="SUBCOMMAND")
    c = csub.add_parser(
        "validate",
        help="check a configuration file and name every problem at once (exit 0 valid, 2 invalid)",
        description="Checks the file's keys and values, the rules between them, approval patterns "
        "against the tools their servers list (connecting to servers without a `tools` list), and "
        "every environment variable, file and group it names. Without FILE: the search order.",
    )
    c.add_argument("file", nargs="?", metavar="FILE")
    c.add_argument(
        "--no-env",
        action="store_true",
        help="check the file alone: environment variables, key files, scripts and groups are not "
        "required, and no MCP server is started (for a file written for another machine or user)",
    )
    csub.add_parser("schema", help="print the JSON Schema of the configuration file")
    c = csub.add_parser("show", help="print the effective configuration, secrets masked")
    c.add_argument("file", nargs="?", metavar="FILE")

    p = sub.add_parser(
        "mcp",
        help="MCP: serve agentd to an MCP client; the one-time OAuth login of an authorization_code server",
    )
    msub = p.add_subparsers(dest="mcp_command", required=True, metavar="SUBCOMMAND")
    m = msub.add_parser(
        "serve",
        help="agentd as an MCP server on stdio (or --http), for Claude Code, Claude Desktop, Cursor, "
        "VS Code (docs/mcp-server.md)",
        description="Speaks MCP on stdin/stdout to the client that started it (with --http, streamable "
        "HTTP to clients holding its bearer token), and the daemon's socket API as the user who started "
        "it. With --print-config, prints the JSON to add to a client's configuration instead.",
    )
    _socket_arg(m)
    m.add_argument(
        "--print-config",
        choices=["claude", "cursor", "vscode"],
        metavar="CLIENT",
        help="print the configuration snippet for CLIENT (claude, cursor or vscode) and exit",
    )
    m.add_argument(
        "--http",
        metavar="HOST:PORT",
        help="serve streamable HTTP at HOST:PORT (loopback unless --allow-remote) instead of stdio",
    )
    m.add_argument(
        "--token-file",
        metavar="FILE",
        help="with --http: the bearer token every request needs (made, mode 600, when missing; "
        "default ~/.config/agentd/mcp-http-token)",
    )
    m.add_argument(
        "--allow-remote",
        action="store_true",
        help="with --http: listen on a non-loopback address (put TLS in front)",
    )
    m = msub.add_parser(
        "login",
        help='authorize agentd at [mcp.NAME] (oauth_flow = "authorization_code"): prints a URL to open, '
        "stores the tokens in the state directory; run it as the daemon's user",
    )
    m.add_argument("name", metavar="NAME")
    m.add_argument("--config", metavar="FILE", help="configuration file (default: search order)")
    m.add_argument("--state-dir", metavar="DIR", help="the daemon's state directory (default: as the daemon)")
    m.add_argument(
        "--paste",
        action="store_true",
        help="also accept the redirected URL pasted here (a browser on another machine cannot reach "
        "this host's loopback)",
    )
    m.add_argument("--timeout", metavar="DURATION", default="5m", help="give up after this long (default 5m)")

    p = sub.add_parser(
        "web",
        help="a dashboard in the browser: tasks, trees, live events, approvals (docs/web.md)",
        description="Serves a local dashboard that talks to the daemon as the user who started it, "
        "and prints one URL carrying a one-time token. Needs the `web` extra (starlette, uvicorn).",
    )
    _socket_arg(p)
    p.add_argument(
        "--listen", metavar="HOST:PORT", default="127.0.0.1:8765", help="where to listen (%(default)s)"
    )
    p.add_argument("--no-open", action="store_true", help="print the URL only; do not open a browser")
    p.add_argument(
        "--allow-remote",
        action="store_true",
        help="let --listen name a non-loopback address (put TLS and authentication in front: docs/web.md)",
    )

    p = sub.add_parser("demo", help="watch a task run on a private daemon (no API key needed)")
    p.add_argument("--keep", action="store_true", help="keep the temporary state directory")
    return parser


def _socket_from_config(command: str, args: argparse.Namespace) -> int | None:
    """A client command's `--config FILE`: the socket it names becomes `--socket`. Returns the
    exit code of a usage error, else None."""
    from agentd.cli.client_commands import resolve_socket
    from agentd.errors import UsageError

    try:
        args.socket = str(resolve_socket(None, args.config))
    except UsageError as exc:
        sys.stderr.write(f"agentd {command}: {exc}\n")
        return 2
    return None


def _mcp_serve(args: argparse.Namespace) -> int:
    from agentd.cli import mcp_serve_command
    from agentd.cli.client_commands import resolve_socket

    if args.print_config is not None:
        return mcp_serve_command.cmd_print_config(args.print_config, args.socket, sys.stdout)
    http = mcp_serve_command.http_flags(args.http, args.token_file, args.allow_remote)
    return mcp_serve_command.cmd_serve(str(resolve_socket(args.socket)), http)


def main(argv: Sequence[str] | None = None) -> int:
    try:
        try:
            return run_command(argv)
        finally:
            sys.stdout.flush()  # what is still buffered meets a closed pipe here, not at exit
    except BrokenPipeError:
        if not _stdout_reader_gone():
            raise  # another pipe (a child's, a socket's): a fault to see, not a reader that left
        _discard_stdout()
        return 0


def _stdout_reader_gone() -> bool:
    """Whether stdout is a pipe (or socket) nobody reads any more."""
    try:
        fd = sys.stdout.fileno()
    except (AttributeError, OSError, ValueError):
        return False
    poller = select.poll()
    poller.register(fd, select.POLLOUT)  # POLLERR and POLLHUP are reported whatever is asked
    return any(events & (select.POLLERR | select.POLLHUP) for _, events in poller.poll(0))


def _discard_stdout() -> None:
    """Point stdout at /dev/null, so the interpreter's own flush at exit writes nowhere instead of
    printing a second BrokenPipeError (the Python docs' "Note on SIGPIPE")."""
    devnull = os.open(os.devnull, os.O_WRONLY)
    try:
        os.dup2(devnull, sys.stdout.fileno())
    finally:
        os.close(devnull)


def run_command(argv: Sequence[str] | None = None) -> int:
    """Parse the command line and run its command; the command's exit code."""
    args = build_parser().parse_args(argv)
    command: str = args.command
    if command == "serve":
        from agentd.daemon import run_serve

        return run_serve(
            args.config, args.socket, args.state_dir, log_content=args.log_content, log_format=args.log_format
        )
    if command == "worker":
        from agentd.worker import run_worker

        return run_worker(args.config, args.state_dir)
    if command == "config":
        from agentd.cli import config_commands

        if args.config_command == "validate":
            return config_commands.cmd_validate(
                args.file, sys.stdout, sys.stderr, check_environment=not args.no_env
            )
        if args.config_command == "schema":
            return config_commands.cmd_schema(sys.stdout)
        return config_commands.cmd_show(args.file, sys.stdout, sys.stderr)
    if command == "run":
        from agentd.cli.run import cmd_run

        return cmd_run(args)
    if getattr(args, "config", None) is not None and getattr(args, "socket", False) is None:
        # a client command's --config names its socket; `mcp login` reads its file for the server
        code = _socket_from_config(command, args)
        if code is not None:
            return code
    if command == "top":
        from agentd.cli.top import cmd_top

        if not 0.1 <= args.interval <= 3600:
            sys.stderr.write("agentd top: --interval must be between 0.1 and 3600 seconds\n")
            return 2
        return cmd_top(args)
    if command == "mcp" and args.mcp_command == "serve":
        return _mcp_serve(args)
    if command == "mcp":
        from agentd.cli.mcp_commands import cmd_login
        from agentd.config.duration import DurationError, parse_duration

        try:
            timeout_s = parse_duration(args.timeout)
        except DurationError as exc:
            sys.stderr.write(f"agentd mcp login: --timeout: {exc}\n")
            return 2
        if not 1 <= timeout_s <= 3600:
            sys.stderr.write("agentd mcp login: --timeout must be between 1 s and 1 h\n")
            return 2
        return cmd_login(
            args.name,
            config_path=args.config,
            state_dir=args.state_dir,
            paste=args.paste,
            timeout_s=timeout_s,
            err=sys.stderr,
        )
    if command == "web":
        from agentd.cli.client_commands import resolve_socket
        from agentd.cli.web_command import cmd_web, web_flags

        flags = web_flags(args.listen, args.no_open, args.allow_remote)
        return cmd_web(str(resolve_socket(args.socket)), flags)
    if command == "demo":
        from agentd.cli.demo import cmd_demo

        return cmd_demo(keep=args.keep)
    from agentd.cli import client_commands

    return client_commands.dispatch(command, args)


if __name__ == "__main__":
    sys.exit(main())
