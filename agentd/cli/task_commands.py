"""The commands about one task: `submit` (plain, `--wait`, `--follow`), `status`, `cancel`,
`logs` and `tree`. `submit --wait` and `--follow` exit with the task's exit code (docs/design.md §12);
Ctrl-C while waiting or following leaves the task running, says so, and exits 130."""

from __future__ import annotations

import argparse
import math
import sys
from typing import TextIO

from agentd.api.client import ApiClient
from agentd.cli import plain_commands
from agentd.cli.outcome import outcome_line
from agentd.cli.plain_commands import print_result
from agentd.cli.progress import detached, follow, render_event
from agentd.cli.task_text import cancel_line, cost_text, describe
from protocol.api import (
    CancelParams,
    CancelRequest,
    EventsParams,
    EventsRequest,
    ScheduleCreateParams,
    ScheduleCreateRequest,
    SubmitParams,
    SubmitRequest,
    SubmitResult,
    TaskRef,
    TaskSpec,
    TaskView,
    TreeRequest,
    WaitParams,
    WaitRequest,
)
from protocol.exit_codes import ExitCode


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
    if not (args.wait or args.follow):
        out.write((submitted.model_dump_json() if args.json else submitted.task_id) + "\n")
        return ExitCode.OK
    try:
        return _see_through(client, args, submitted, out)
    except KeyboardInterrupt:
        sys.stderr.write(detached(submitted.task_id, what="following" if args.follow else "waiting for"))
        return ExitCode.INTERRUPTED


def _see_through(client: ApiClient, args: argparse.Namespace, submitted: SubmitResult, out: TextIO) -> int:
    """Follow (or just wait for) a submitted task to its end; its exit code."""
    task_id = submitted.task_id
    if args.follow:
        _announce(submitted, out, as_json=args.json)
        if args.json:
            follow(client, task_id, out, json_lines=True)
        elif out.isatty():
            # A terminal is asked about gated tool calls, on a second connection: the first is
            # busy streaming.
            with ApiClient(client.path, timeout_s=30.0) as decide:
                follow(client, task_id, out, decide=decide)
        else:
            follow(client, task_id, out)
    view = client.call(WaitRequest(params=WaitParams(task_id=task_id)), timeout_s=math.inf)
    if args.json:
        out.write(view.model_dump_json() + "\n")
    else:
        if args.follow:
            out.write(describe(view) + "\n")
        print_result(view, out)
    out.flush()
    line = outcome_line("submit", view)
    if line is not None:
        sys.stderr.write(line + "\n")
    return view.exit_code if view.exit_code is not None else ExitCode.FAILURE


def _announce(submitted: SubmitResult, out: TextIO, *, as_json: bool) -> None:
    """The task's id, before any of its events: a follower that stops knows what to reach."""
    if as_json:
        out.write(submitted.model_dump_json() + "\n")
    else:
        how = "submitted" if submitted.created else "already submitted with this idempotency key"
        hint = "; following it (Ctrl-C stops following, the task goes on)" if out.isatty() else ""
        out.write(f"task {submitted.task_id} {how}{hint}\n")
    out.flush()


def cmd_status(client: ApiClient, args: argparse.Namespace, out: TextIO) -> int:
    """A TASK the plain path would not send: the models word what is wrong with it."""
    TaskRef(task_id=args.task)
    return plain_commands.cmd_status(client, args, out)


def cmd_cancel(client: ApiClient, args: argparse.Namespace, out: TextIO) -> int:
    view = client.call(CancelRequest(params=CancelParams(task_id=args.task)))
    out.write((view.model_dump_json() if args.json else cancel_line(view)) + "\n")
    return ExitCode.OK


def cmd_logs(client: ApiClient, args: argparse.Namespace, out: TextIO) -> int:
    if args.follow:
        try:
            follow(client, args.task, out, json_lines=args.json)
        except KeyboardInterrupt:
            sys.stderr.write(detached(args.task))
            return ExitCode.INTERRUPTED
        return ExitCode.OK
    shown = 0
    for item in client.stream(EventsRequest(params=EventsParams(task_id=args.task))):
        if isinstance(item, TaskView):
            break
        line = item.model_dump_json() if args.json else render_event(item)
        if line is not None:
            out.write(line + "\n")
            shown += 1
    if not shown and not args.json:
        out.write("no events yet\n")
    return ExitCode.OK


def cmd_tree(client: ApiClient, args: argparse.Namespace, out: TextIO) -> int:
    for node in client.call(TreeRequest(params=TaskRef(task_id=args.task))):
        if args.json:
            out.write(node.model_dump_json() + "\n")
            continue
        status = node.status.value if node.status else node.state
        steps = f"{node.usage.steps}/{node.grant_steps or '-'} steps"
        grant = f"{steps}, {node.usage.tokens}/{node.grant_tokens or '-'} tokens"
        if node.usage.cost_usd:
            grant += f", {cost_text(node.usage.cost_usd)}"
        out.write(f"{'  ' * node.depth}{node.handle}  {status}  pid {node.pid or '-'}  {grant}\n")
    return ExitCode.OK
