"""Client commands of the approval gate: `approvals`, `approve`, `deny`, and what
`submit --follow` shows and asks when a task's tool call waits for a person.

A person decides only requests of tasks they own (admins: all); the daemon enforces it, this
module only asks.
"""

from __future__ import annotations

import argparse
import sys
import time
from typing import TextIO

from agentd.api.client import ApiClient
from agentd.cli.display import cut, human_age, one_line, safe
from agentd.cli.task_ids import short_ids
from agentd.errors import ApiClientError
from protocol.api import (
    ApprovalDecideParams,
    ApprovalDecideRequest,
    ApprovalListParams,
    ApprovalListRequest,
    ApprovalView,
    EventView,
)
from protocol.exit_codes import ExitCode

# A person approves exactly the arguments shown: up to this many characters are shown whole; past
# it the line says plainly how much is cut and how to see all of it.
ARGS_SHOWN = 4000
ALL_ARGUMENTS = "`agentd approvals --json` shows them all"


def _arguments(text: str) -> str:
    """Arguments as JSON text, every control and bidi character escaped (nothing folded: two
    spaces stay two), cut only past `ARGS_SHOWN` and then saying so. Text the daemon's event
    already cut (it ends in "…", which JSON never does) says so too."""
    shown = cut(safe(text, keep_newlines=False), ARGS_SHOWN, hint=ALL_ARGUMENTS)
    if text.endswith("…") and len(shown) == len(safe(text, keep_newlines=False)):
        shown += f" [cut; {ALL_ARGUMENTS}]"
    return shown


def describe_approval(view: ApprovalView, *, now: float, short_id: str | None = None) -> str:
    """One line: task, call, tool (as the model names it), arguments, age."""
    import json

    args = json.dumps(view.arguments, ensure_ascii=False, sort_keys=True, separators=(", ", ": "))
    age_s = max(0.0, now - view.requested_at)
    left_s = max(0.0, view.expires_at - now)
    tool = one_line(f"{view.server}__{view.tool}")
    return (
        f"{short_id or view.task_id}  {view.call}  {tool} {_arguments(args)}  "
        f"waiting {human_age(age_s)}, denied in {human_age(left_s)} if undecided  "
        f"(node {view.handle}, owner uid {view.owner_uid})"
    )


def cmd_approvals(client: ApiClient, args: argparse.Namespace, out: TextIO) -> int:
    views = client.call(ApprovalListRequest(params=ApprovalListParams(task_id=args.task)))
    now = time.time()
    if args.json:
        for view in views:
            out.write(view.model_dump_json() + "\n")
        return ExitCode.OK
    if not views:
        out.write("no pending approval requests you may decide\n")
        return ExitCode.OK
    short = short_ids(v.task_id for v in views)
    for view in views:
        out.write(describe_approval(view, now=now, short_id=short[view.task_id]) + "\n")
    out.write("decide: agentd approve TASK [CALL]  |  agentd deny TASK [CALL] --reason TEXT\n")
    return ExitCode.OK


def cmd_decide(client: ApiClient, args: argparse.Namespace, out: TextIO) -> int:
    approve = args.command == "approve"
    params = ApprovalDecideParams(
        task_id=args.task, call=args.call, approve=approve, reason=getattr(args, "reason", None)
    )
    view = client.call(ApprovalDecideRequest(params=params))
    if args.json:
        out.write(view.model_dump_json() + "\n")
    else:
        out.write(f"{view.call} {view.state}: {one_line(view.server)}__{one_line(view.tool)}\n")
    return ExitCode.OK


def render_approval(event: EventView) -> str | None:
    """The progress line of an approval event (None: not one)."""
    f = event.fields
    if event.event == "approval.requested":
        tool = one_line(f"{f.get('server')}__{f.get('tool')}")
        return f"⏸ awaiting approval: {tool} {_arguments(str(f.get('arguments', '')))}"
    if event.event == "approval.decided":
        outcome, who = f.get("outcome"), f.get("decider_uid")
        if outcome == "approved":
            return f"  ✓ approved by uid {who}"
        if outcome == "timeout":
            return f"  ✗ not decided in time: denied ({one_line(str(f.get('reason') or 'timeout'))})"
        by = f" by uid {who}" if who is not None else ""
        return f"  ✗ denied{by}" + (f": {one_line(str(f.get('reason')))}" if f.get("reason") else "")
    return None


def ask(client: ApiClient | None, task_id: str, event: EventView, out: TextIO, *, inp: TextIO | None) -> None:
    """After an `approval.requested` line: on a terminal (`inp`, with a `client` to answer on) ask
    `approve? [y/N]` and send the answer; otherwise say how to decide. A failed decision (decided
    elsewhere meanwhile) is reported."""
    call = event.fields.get("call")
    if not isinstance(call, str):
        return
    if client is None or inp is None or not inp.isatty():
        out.write(
            f"  decide: agentd approve {task_id} {call}  |  agentd deny {task_id} {call} --reason TEXT\n"
        )
        out.flush()
        return
    out.write("  approve? [y/N] ")
    out.flush()
    answer = inp.readline().strip().lower()
    approve = answer in ("y", "yes")
    reason = None if approve else "denied at the submitting terminal"
    params = ApprovalDecideParams(task_id=task_id, call=call, approve=approve, reason=reason)
    try:
        client.call(ApprovalDecideRequest(params=params))
    except ApiClientError as exc:
        out.write(f"  (not recorded: {exc})\n")
        out.flush()


def prompt_input() -> TextIO | None:
    """Where `submit --follow` reads answers: stdin when it is a terminal."""
    return sys.stdin if sys.stdin is not None and sys.stdin.isatty() else None
