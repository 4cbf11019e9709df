"""Client commands: `submit`, `status`, `list`, `cancel`, `logs`, `tree` against a running daemon.

Every command accepts `--socket` and `--json`. `submit --wait` and `submit --follow` exit with the
task's exit code (DESIGN §12); a daemon that cannot be reached is exit 1 with a hint.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import sys
from collections.abc import Callable
from pathlib import Path
from typing import TextIO

from pydantic import JsonValue, ValidationError

from agentd.api.client import ApiClient
from agentd.errors import AgentdError, ApiClientError
from protocol.api import (
    INVALID_SPEC,
    CancelParams,
    CancelRequest,
    EventsParams,
    EventsRequest,
    EventView,
    GetRequest,
    ListParams,
    ListRequest,
    SpecLimits,
    SubmitParams,
    SubmitRequest,
    TaskRef,
    TaskSpec,
    TaskView,
    TreeRequest,
    WaitParams,
    WaitRequest,
)
from protocol.exit_codes import ExitCode
from protocol.jsonrpc import INVALID_PARAMS
from protocol.spawn import OutputContract


class UsageError(AgentdError):
    """A bad flag value: reported with exit code 2 before anything is sent."""


def resolve_socket(flag: str | None) -> Path:
    """--socket, $AGENTD_SOCKET, the config file's daemon.socket (if readable), or the default."""
    from agentd.config import paths as config_paths

    configured = None
    if not flag and "AGENTD_SOCKET" not in os.environ:
        located = config_paths.locate_config(None, os.environ)
        if located.path is not None:
            configured = _configured_socket(located.path)
    return config_paths.socket_path(os.environ, configured, flag)


def _configured_socket(path: Path) -> str | None:
    import tomllib

    try:
        data = tomllib.loads(path.read_text())
    except (OSError, ValueError):
        return None
    daemon = data.get("daemon")
    socket = daemon.get("socket") if isinstance(daemon, dict) else None
    return socket if isinstance(socket, str) else None


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
        )
    except ValidationError as exc:
        raise UsageError(_invalid("task", exc)) from None


def _invalid(what: str, exc: ValidationError) -> str:
    first = exc.errors()[0]
    where = ".".join(str(p) for p in first["loc"])
    return f"invalid {what}: {where}: {first['msg']}"


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
    if name in ("subagent.stuck", "subagent.signal", "subagent.exit"):
        return f"  [{name}] " + " ".join(f"{k}={v}" for k, v in f.items() if k != "handle")
    return None


def follow(client: ApiClient, task_id: str, out: TextIO, *, human: bool) -> None:
    for item in client.stream(EventsRequest(params=EventsParams(task_id=task_id, follow=True))):
        if isinstance(item, TaskView):
            return
        if human:
            line = render_event(item)
            if line is not None:
                out.write(line + "\n")
                out.flush()
        else:
            out.write(item.model_dump_json() + "\n")
            out.flush()


# ---- commands ------------------------------------------------------------------------------


def cmd_submit(client: ApiClient, args: argparse.Namespace, out: TextIO) -> int:
    spec = spec_from_args(args, model=args.model, mcp=list(args.mcp))
    params = SubmitParams(spec=spec, idempotency_key=args.idempotency_key or None)
    submitted = client.call(SubmitRequest(params=params))
    task_id = submitted.task_id
    if not (args.wait or args.follow):
        out.write((json.dumps(submitted.model_dump(mode="json")) if args.json else task_id) + "\n")
        return ExitCode.OK
    human = args.follow and out.isatty() and not args.json
    if args.follow:
        # A terminal gets a progress view; anything else gets one JSON line per event.
        follow(client, task_id, out, human=human)
    view = client.call(WaitRequest(params=WaitParams(task_id=task_id)), timeout_s=math.inf)
    if human:
        out.write(describe(view) + "\n")
        print_result(view, out)
    elif args.json or args.follow:
        out.write(view.model_dump_json() + "\n")
    else:
        print_result(view, out)
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
    params = ListParams(state=args.state or None, limit=args.limit, before=args.before)
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


COMMANDS: dict[str, Callable[[ApiClient, argparse.Namespace, TextIO], int]] = {
    "submit": cmd_submit,
    "status": cmd_status,
    "cancel": cmd_cancel,
    "list": cmd_list,
    "logs": cmd_logs,
    "tree": cmd_tree,
}


def dispatch(command: str, args: argparse.Namespace) -> int:
    try:
        path = resolve_socket(args.socket)
        with ApiClient(path) as client:
            return COMMANDS[command](client, args, sys.stdout)
    except UsageError as exc:
        sys.stderr.write(f"agentd {command}: {exc}\n")
        return ExitCode.USAGE
    except ValidationError as exc:  # a flag value the method's params refuse (`--limit 0`)
        sys.stderr.write(f"agentd {command}: {_invalid('arguments', exc)}\n")
        return ExitCode.USAGE
    except ApiClientError as exc:
        sys.stderr.write(f"agentd {command}: {exc}\n")
        return ExitCode.USAGE if exc.code in (INVALID_PARAMS, INVALID_SPEC) else ExitCode.FAILURE
    except KeyboardInterrupt:
        return ExitCode.INTERRUPTED
