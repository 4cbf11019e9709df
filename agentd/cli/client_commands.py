"""Client commands: `submit`, `status`, `list`, `cancel`, `logs`, `tree`, `schedules` against a
running daemon.

Every command accepts `--socket` and `--json`. `submit --wait` and `submit --follow` exit with the
task's exit code (DESIGN §12); a daemon that cannot be reached is exit 1 with a hint.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import stat
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import TextIO

from pydantic import JsonValue, ValidationError

from agentd.api.client import ApiClient
from agentd.cli import approval_commands, resume_commands
from agentd.cli.flag_errors import TASK_FLAGS, flag_problem, spec_problem
from agentd.cli.outcome import outcome_line
from agentd.errors import AgentdError, ApiClientError
from protocol.api import (
    IDEMPOTENCY_CONFLICT,
    INVALID_SPEC,
    CancelParams,
    CancelRequest,
    EventsParams,
    EventsRequest,
    EventView,
    GetRequest,
    ListParams,
    ListRequest,
    ScheduleCreateParams,
    ScheduleCreateRequest,
    ScheduleDeleteRequest,
    ScheduleGetRequest,
    ScheduleListRequest,
    SchedulePauseRequest,
    ScheduleRef,
    ScheduleResumeRequest,
    ScheduleSpec,
    ScheduleView,
    SpecLimits,
    SubmitParams,
    SubmitRequest,
    TaskRef,
    TaskSpec,
    TaskView,
    TreeRequest,
    TriggerListRequest,
    TriggerPauseRequest,
    TriggerRef,
    TriggerRestartRequest,
    TriggerResumeRequest,
    TriggerView,
    WaitParams,
    WaitRequest,
)
from protocol.contract import OutputContract
from protocol.exit_codes import ExitCode
from protocol.jsonrpc import INVALID_PARAMS


class UsageError(AgentdError):
    """A bad flag value: reported with exit code 2 before anything is sent."""


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


def spec_from_args(args: argparse.Namespace, *, model: str | None, mcp: list[str]) -> TaskSpec:
    """The task spec the flags describe; raises UsageError for a bad value."""
    from agentd.config.duration import DurationError, parse_duration

    deadline_s = None
    if args.deadline is not None:
        try:
            deadline_s = parse_duration(args.deadline)
        except DurationError as exc:
            raise UsageError(f"--deadline: {exc}") from None
    contract = OutputContract()
    if args.output_schema is not None:
        try:
            schema = json.loads(Path(args.output_schema).read_text())
        except OSError as exc:
            raise UsageError(f"--output-schema: cannot read {args.output_schema}: {exc.strerror}") from None
        except ValueError as exc:
            raise UsageError(f"--output-schema: {args.output_schema} is not JSON: {exc}") from None
        if not isinstance(schema, dict):
            raise UsageError("--output-schema: the schema must be a JSON object")
        contract = OutputContract(format="json", schema_=schema)
    try:
        return TaskSpec(
            instruction=args.instruction,
            model=model,
            mcp=mcp,
            output_contract=contract,
            limits=SpecLimits(max_steps=args.max_steps, max_tokens=args.max_tokens, deadline_s=deadline_s),
            approve=list(getattr(args, "approve", None) or []),
            on_budget=getattr(args, "on_budget", None),
        )
    except ValidationError as exc:
        raise UsageError(flag_problem(exc, TASK_FLAGS)) from None


SCHEDULE_FLAGS = (
    *("cron", "every", "loop", "tz", "interval", "max_runs"),
    *("missed", "overlap", "max_failures", "max_total_tokens"),
)
# A schedule's field as the flag that sets it, so an error names what the user typed.
_FLAG_OF = {
    "cron": "--cron",
    "tz": "--tz",
    "every_s": "--every",
    "interval_s": "--interval",
    "max_runs": "--max-runs",
    "max_failures": "--max-failures",
    "max_total_tokens": "--max-total-tokens",
}


def schedule_from_args(args: argparse.Namespace) -> ScheduleSpec | None:
    """The schedule the flags describe (None: a plain task); raises UsageError naming the flag.

    Checked here, before anything is sent, with the same checks the daemon applies."""
    given = [name for name in SCHEDULE_FLAGS if getattr(args, name, None) not in (None, False)]
    if not given:
        return None
    from agentd.config.duration import DurationError, parse_duration
    from agentd.scheduling.plan import TriggerError, parse_trigger

    if not (args.cron or args.every or args.loop):
        raise UsageError(f"--{given[0].replace('_', '-')} needs one of --cron, --every or --loop")
    if args.wait or args.follow:
        raise UsageError("--wait and --follow apply to one task, not to a schedule")
    if args.interval is not None and not args.loop:
        raise UsageError("--interval applies only with --loop (use --every for a fixed period)")
    if args.tz is not None and not args.cron:
        raise UsageError("--tz applies only with --cron")
    durations: dict[str, float | None] = {}
    for flag in ("every", "interval"):
        value = getattr(args, flag)
        try:
            durations[flag] = parse_duration(value) if value is not None else None
        except DurationError as exc:
            raise UsageError(f"--{flag}: {exc}") from None
    kind = "cron" if args.cron else "interval" if args.every else "loop"
    fields: dict[str, object] = {
        "kind": kind,
        "cron": args.cron,
        "tz": args.tz,
        "every_s": durations["every"],
        "max_runs": args.max_runs,
        "max_total_tokens": args.max_total_tokens,
    }
    if durations["interval"] is not None:
        fields["interval_s"] = durations["interval"]
    for name in ("missed", "overlap", "max_failures"):
        if getattr(args, name) is not None:
            fields[name] = getattr(args, name)
    try:
        spec = ScheduleSpec.model_validate({k: v for k, v in fields.items() if v is not None})
    except ValidationError as exc:
        raise UsageError(flag_problem(exc, _FLAG_OF)) from None
    try:
        parse_trigger(spec, time.time())  # from now: whether it fires is the daemon's question too
    except TriggerError as exc:
        raise UsageError(f"{_FLAG_OF.get(exc.field, exc.field)}: {str(exc).split(': ', 1)[1]}") from None
    return spec


def print_result(view: TaskView, out: TextIO) -> None:
    """The result on stdout: JSON when structured, else the text itself."""
    if view.result is None:
        return
    if isinstance(view.result, str):
        out.write(view.result + ("" if view.result.endswith("\n") else "\n"))
    else:
        out.write(json.dumps(view.result, indent=2, ensure_ascii=False) + "\n")


def describe(view: TaskView) -> str:
    status = view.status.value if view.status else view.state
    parts = [view.task_id, status]
    if view.exit_code is not None:
        parts.append(f"exit {view.exit_code}")
    parts.append(f"steps {view.usage.steps}")
    parts.append(f"tokens {view.usage.tokens}")
    if view.resumes:
        parts.append(f"resumed {view.resumes}×")
    if view.forked_from is not None:
        parts.append(f"forked from {view.forked_from.task_id} step {view.forked_from.step}")
    if view.schedule_id:
        parts.append(f"schedule {view.schedule_id}")
    if view.trigger:
        parts.append(f"trigger {view.trigger} {view.uri or ''}".rstrip())
    if view.abort:
        parts.append(f"abort {view.abort}")
    if view.error:
        parts.append(f"error {view.error.kind}: {view.error.message.splitlines()[0][:200]}")
    return "  ".join(parts)


# ---- progress rendering --------------------------------------------------------------------


def _int(value: JsonValue) -> int:
    return value if isinstance(value, int) else 0


def render_event(event: EventView) -> str | None:
    """One human-readable progress line for an event, or None to skip it."""
    f = event.fields
    name = event.event
    if name == "loop.start":
        return f"▶ started (max {f.get('max_steps')} steps, {f.get('max_tokens')} tokens)"
    if name == "mcp.connect":
        return f"  MCP {f.get('server')}: {f.get('outcome')} ({f.get('tools', 0)} tools)"
    if name == "tool.call":
        return f"  → {f.get('tool')}"
    if name == "mcp.progress":
        total = f.get("total")
        done = f"{f.get('progress')}/{total}" if total is not None else f"{f.get('progress')}"
        message = f" {f.get('message')}" if f.get("message") else ""
        return f"  … {f.get('server')}/{f.get('tool')} {done}{message}"
    if name == "mcp.log" and f.get("level") not in ("debug", "info", "notice"):
        return f"  MCP {f.get('server')} {f.get('level')}: {f.get('message')}"
    if name == "tool.result":
        outcome = "error" if f.get("is_error") else "ok"
        return f"  ← {f.get('tool')} {outcome} ({f.get('dur_ms')} ms)"
    if name == "loop.step":
        tokens = _int(f.get("tokens_in")) + _int(f.get("tokens_out"))
        return (
            f"step {f.get('step')} · {f.get('kind')} · {f.get('tool_calls', 0)} tool calls · tokens {tokens}"
        )
    if name == "loop.error":
        return f"  ! {f.get('kind')}: {f.get('detail')}"
    if name == "intel.result" and f.get("outcome") not in ("ok", None):
        return f"  model {f.get('endpoint')}: {f.get('outcome')} (status {f.get('status')}, {f.get('err')})"
    if name == "loop.final":
        return f"■ {f.get('status')} after {f.get('steps')} steps, {f.get('tokens')} tokens"
    if name == "task.paused":
        return f"⏸ {f.get('status')}: waiting for more budget (`agentd extend TASK --steps N`)"
    if name == "task.extended":
        return f"↑ extended to {f.get('max_steps')} steps, {f.get('max_tokens')} tokens"
    if name == "task.parked":
        return "⏸ parked: the daemon is stopping; the task resumes from its last step at the next start"
    if name == "task.resumed":
        node = f" node {f.get('handle')}" if f.get("handle") else ""
        return f"↻ resumed{node} from step {f.get('from_step')} (journaled steps replayed, not run again)"
    if name in ("subagent.stuck", "subagent.signal", "subagent.exit"):
        return f"  [{name}] " + " ".join(f"{k}={v}" for k, v in f.items() if k != "handle")
    return approval_commands.render_approval(event)


def follow(
    client: ApiClient, task_id: str, out: TextIO, *, human: bool, decide: ApiClient | None = None
) -> None:
    """Stream a task's events until it ends. With `decide` (a second connection), a request for
    approval is asked on the terminal (`approve? [y/N]`) or explained."""
    for item in client.stream(EventsRequest(params=EventsParams(task_id=task_id, follow=True))):
        if isinstance(item, TaskView):
            return
        if human:
            line = render_event(item)
            if line is not None:
                out.write(line + "\n")
                out.flush()
            if decide is not None and item.event == "approval.requested":
                approval_commands.ask(decide, task_id, item, out, inp=approval_commands.prompt_input())
        else:
            out.write(item.model_dump_json() + "\n")
            out.flush()


# ---- commands ------------------------------------------------------------------------------


def preflight_submit(args: argparse.Namespace) -> None:
    """Check every flag before connecting: a bad value is exit 2 whether or not a daemon runs."""
    args.spec = spec_from_args(args, model=args.model, mcp=list(args.mcp))
    args.schedule = schedule_from_args(args)


def cmd_submit(client: ApiClient, args: argparse.Namespace, out: TextIO) -> int:
    spec: TaskSpec = args.spec
    if args.schedule is not None:
        created = client.call(
            ScheduleCreateRequest(
                params=ScheduleCreateParams(
                    spec=spec, trigger=args.schedule, idempotency_key=args.idempotency_key or None
                )
            )
        )
        out.write((created.model_dump_json() if args.json else created.schedule_id) + "\n")
        return ExitCode.OK
    params = SubmitParams(spec=spec, idempotency_key=args.idempotency_key or None)
    submitted = client.call(SubmitRequest(params=params))
    task_id = submitted.task_id
    if not (args.wait or args.follow):
        out.write((json.dumps(submitted.model_dump(mode="json")) if args.json else task_id) + "\n")
        return ExitCode.OK
    human = args.follow and out.isatty() and not args.json
    if args.follow and human:
        # A terminal gets a progress view (and is asked about gated tool calls on a second
        # connection: the first is busy streaming).
        with ApiClient(client.path, timeout_s=30.0) as decide:
            follow(client, task_id, out, human=True, decide=decide)
    elif args.follow:
        # Anything else gets one JSON line per event.
        follow(client, task_id, out, human=False)
    view = client.call(WaitRequest(params=WaitParams(task_id=task_id)), timeout_s=math.inf)
    if human:
        out.write(describe(view) + "\n")
        print_result(view, out)
    elif args.json or args.follow:
        out.write(view.model_dump_json() + "\n")
    else:
        print_result(view, out)
    out.flush()
    line = outcome_line("submit", view)
    if line is not None:
        sys.stderr.write(line + "\n")
    return view.exit_code if view.exit_code is not None else ExitCode.FAILURE


def cmd_status(client: ApiClient, args: argparse.Namespace, out: TextIO) -> int:
    view = client.call(GetRequest(params=TaskRef(task_id=args.task)))
    if args.json:
        out.write(view.model_dump_json() + "\n")
    else:
        out.write(describe(view) + "\n")
        print_result(view, out)
    return ExitCode.OK


def cmd_cancel(client: ApiClient, args: argparse.Namespace, out: TextIO) -> int:
    view = client.call(CancelRequest(params=CancelParams(task_id=args.task)))
    out.write((view.model_dump_json() if args.json else describe(view)) + "\n")
    return ExitCode.OK


def cmd_list(client: ApiClient, args: argparse.Namespace, out: TextIO) -> int:
    params = ListParams(
        state=args.state or None,
        limit=args.limit,
        before=args.before,
        schedule_id=getattr(args, "schedule", None),
    )
    views = client.call(ListRequest(params=params))
    for view in views:
        out.write((view.model_dump_json() if args.json else describe(view)) + "\n")
    if len(views) == args.limit and not args.json:
        out.write(f"(more: agentd list --before {views[-1].task_id})\n")
    return ExitCode.OK


def cmd_logs(client: ApiClient, args: argparse.Namespace, out: TextIO) -> int:
    human = not args.json
    if args.follow:
        follow(client, args.task, out, human=human)
        return ExitCode.OK
    for item in client.stream(EventsRequest(params=EventsParams(task_id=args.task))):
        if isinstance(item, TaskView):
            break
        line = render_event(item) if human else item.model_dump_json()
        if line is not None:
            out.write(line + "\n")
    return ExitCode.OK


def cmd_tree(client: ApiClient, args: argparse.Namespace, out: TextIO) -> int:
    for node in client.call(TreeRequest(params=TaskRef(task_id=args.task))):
        if args.json:
            out.write(node.model_dump_json() + "\n")
            continue
        status = node.status.value if node.status else node.state
        steps = f"{node.usage.steps}/{node.grant_steps or '-'} steps"
        grant = f"{steps}, {node.usage.tokens}/{node.grant_tokens or '-'} tokens"
        out.write(f"{'  ' * node.depth}{node.handle}  {status}  pid {node.pid or '-'}  {grant}\n")
    return ExitCode.OK


def _when(at: float | None) -> str:
    if at is None:
        return "-"
    import datetime

    return datetime.datetime.fromtimestamp(at, datetime.UTC).strftime("%Y-%m-%d %H:%M:%SZ")


def describe_schedule(view: ScheduleView) -> str:
    """One line: id, kind, expression, next fire, last run and its status, state."""
    trigger = view.trigger
    if trigger.kind == "cron":
        expression = f"{trigger.cron}" + (f" ({trigger.tz})" if trigger.tz else "")
    elif trigger.kind == "interval":
        expression = f"every {trigger.every_s:g}s"
    else:
        expression = f"loop, pause {view.pause_s if view.pause_s is not None else trigger.interval_s:g}s"
    last = f"{view.last_task_id} {view.last_status.value if view.last_status else 'running'}"
    parts = [
        view.schedule_id,
        trigger.kind,
        repr(expression),
        f"next {_when(view.next_fire_at)}",
        f"last {last if view.last_task_id else '-'}",
        f"runs {view.runs}" + (f"/{trigger.max_runs}" if trigger.max_runs else ""),
        f"skipped {view.skipped}",
        view.state + (f" ({view.note})" if view.note else ""),
    ]
    if view.name:
        parts.insert(1, f"[{view.name}]")
    return "  ".join(parts)


def cmd_schedules(client: ApiClient, args: argparse.Namespace, out: TextIO) -> int:
    if args.action is None:
        for view in client.call(ScheduleListRequest()):
            out.write((view.model_dump_json() if args.json else describe_schedule(view)) + "\n")
        return ExitCode.OK
    ref = ScheduleRef(schedule_id=args.schedule)
    request = {
        "show": ScheduleGetRequest,
        "pause": SchedulePauseRequest,
        "resume": ScheduleResumeRequest,
        "delete": ScheduleDeleteRequest,
    }[args.action](params=ref)
    view = client.call(request)
    out.write(
        (view.model_dump_json() if args.json or args.action == "show" else describe_schedule(view)) + "\n"
    )
    return ExitCode.OK


def preflight_schedules(args: argparse.Namespace) -> None:
    if args.action is not None and not args.schedule:
        raise UsageError(f"{args.action} needs a schedule ID")
    if args.action is None and args.schedule:
        raise UsageError("give an action (show, pause, resume, delete) before the schedule ID")


TRIGGER_COLUMNS = (
    "NAME",
    "SERVER",
    "URI/GLOB",
    "ROUTE",
    "STATE",
    "DELIVERIES",
    "TASKS",
    "LAST FIRED",
    "LAST ERROR",
)


def _ago(at: float | None) -> str:
    if at is None:
        return "-"
    return time.strftime("%Y-%m-%d %H:%M:%S", time.gmtime(at)) + "Z"


def trigger_row(view: TriggerView) -> tuple[str, ...]:
    target = view.uri if view.uri is not None else f"{view.glob} ({view.subscribed} URIs)"
    error = " ".join((view.last_error or "-").split())[:80]
    return (
        view.name,
        view.server,
        target,
        view.route,
        view.state,
        str(view.deliveries),
        f"{view.tasks_started} ({view.inflight} unfinished)" if view.inflight else str(view.tasks_started),
        _ago(view.last_fired_at),
        error,
    )


def format_table(header: tuple[str, ...], rows: list[tuple[str, ...]]) -> str:
    widths = [max(len(cell) for cell in column) for column in zip(header, *rows, strict=True)]
    lines = [
        "  ".join(cell.ljust(w) for cell, w in zip(row, widths, strict=True)).rstrip()
        for row in [header, *rows]
    ]
    return "\n".join(lines)


def cmd_triggers(client: ApiClient, args: argparse.Namespace, out: TextIO) -> int:
    if args.action is None:
        views = client.call(TriggerListRequest())
        if args.json:
            for view in views:
                out.write(view.model_dump_json() + "\n")
        elif not views:
            out.write("no triggers configured ([[trigger]] tables; see docs/triggers.md)\n")
        else:
            out.write(format_table(TRIGGER_COLUMNS, [trigger_row(v) for v in views]) + "\n")
        return ExitCode.OK
    request = {
        "pause": TriggerPauseRequest,
        "resume": TriggerResumeRequest,
        "restart": TriggerRestartRequest,
    }[args.action](params=TriggerRef(name=args.name))
    view = client.call(request)
    out.write((view.model_dump_json() if args.json else f"{view.name}: {view.state}") + "\n")
    return ExitCode.OK


def preflight_triggers(args: argparse.Namespace) -> None:
    if args.action is not None and not args.name:
        raise UsageError(f"{args.action} needs a trigger NAME (see `agentd triggers`)")
    if args.action is None and args.name:
        raise UsageError("give an action (pause, resume, restart) before the trigger NAME")


def preflight_extend(args: argparse.Namespace) -> None:
    from agentd.config.duration import DurationError, parse_duration

    try:
        args.deadline_s = parse_duration(args.deadline) if args.deadline is not None else None
    except DurationError as exc:
        raise UsageError(f"--deadline: {exc}") from None


PREFLIGHT: dict[str, Callable[[argparse.Namespace], None]] = {
    "extend": preflight_extend,
    "submit": preflight_submit,
    "schedules": preflight_schedules,
    "triggers": preflight_triggers,
}

COMMANDS: dict[str, Callable[[ApiClient, argparse.Namespace, TextIO], int]] = {
    "submit": cmd_submit,
    "status": cmd_status,
    "cancel": cmd_cancel,
    "list": cmd_list,
    "logs": cmd_logs,
    "tree": cmd_tree,
    "transcript": resume_commands.cmd_transcript,
    "fork": resume_commands.cmd_fork,
    "extend": resume_commands.cmd_extend,
    "schedules": cmd_schedules,
    "approvals": approval_commands.cmd_approvals,
    "approve": approval_commands.cmd_decide,
    "deny": approval_commands.cmd_decide,
    "triggers": cmd_triggers,
}


def dispatch(command: str, args: argparse.Namespace) -> int:
    try:
        preflight = PREFLIGHT.get(command)
        if preflight is not None:
            preflight(args)
        path = resolve_socket(args.socket)
        with ApiClient(path) as client:
            return COMMANDS[command](client, args, sys.stdout)
    except UsageError as exc:
        sys.stderr.write(f"agentd {command}: {exc}\n")
        return ExitCode.USAGE
    except ValidationError as exc:  # a flag value the method's params refuse (`--limit 0`)
        sys.stderr.write(f"agentd {command}: {flag_problem(exc, {})}\n")
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
