"""Client commands answered without the models: `agentd status`, `agentd list` and `agentd submit`
(no `--wait`, `--follow`, schedule or `--output-schema`) send plain JSON and print from it, so they
never import pydantic or `protocol.api` (docs/decisions.md, "A read path without the models").

`plain_runner` decides, before anything is sent, whether a command can run here: only when every
flag value passes checks no looser than the models' (tests/cli/test_plain_wire.py holds them to
it). Any other value goes to the command's model path, which words its refusal as always. What
is printed is what the model path prints: the same text functions over `TaskFacts`, and for
`--json` the daemon's own bytes (`PlainResult.text`), which are the result model's
`model_dump_json()`.
"""

from __future__ import annotations

import argparse
import functools
import json
import re
import shutil
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, TextIO

from agentd.api.client import BAD_RESPONSE, ApiClient, PlainResult
from agentd.cli.task_facts import ShapeError, TaskFacts, task_facts
from agentd.cli.task_ids import normalised, short_ids
from agentd.cli.task_text import list_lines, result_text, status_lines
from agentd.errors import ApiClientError
from protocol.exit_codes import ExitCode

if TYPE_CHECKING:
    from agentd.cli.task_like import TaskLike

Runner = Callable[[ApiClient, argparse.Namespace, TextIO], int]

# The bounds of the models' fields these commands fill (protocol/api.py), checked before sending.
ID_CHARS_MAX = 64  # TaskRef.task_id, ListParams.before, schedule_id and trigger
LIST_LIMIT_MAX = 1000  # ListParams.limit
INSTRUCTION_MAX = 1_000_000  # TaskSpec.instruction
NAMES_MAX = 64  # TaskSpec.mcp, TaskSpec.approve (items)
NAME_CHARS_MAX = 64  # protocol.names.Name
NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]*")  # protocol.names.Name, matched whole
APPROVE_CHARS_MAX = 200  # an item of TaskSpec.approve
MAX_STEPS = 100_000  # SpecLimits.max_steps
DEADLINE_MAX_S = 7 * 24 * 3600  # SpecLimits.deadline_s
MAX_COST = 1_000_000  # SpecLimits.max_cost
IDEMPOTENCY_KEY_MAX = 128  # SubmitParams.idempotency_key
# `submit` flags that make a schedule (agentd.cli.flags.SCHEDULE_FLAGS): the model path's.
SCHEDULE_FLAGS = (
    *("cron", "every", "loop", "tz", "interval", "max_runs"),
    *("missed", "overlap", "max_failures", "max_total_tokens", "daily_cost"),
)


def plain_runner(command: str, args: argparse.Namespace) -> Runner | None:
    """The plain command for `command` with these flags, or None when it needs the models."""
    if command == "status" and _is_task_ref(args.task):
        return cmd_status
    if command == "list" and list_params(args) is not None:
        return cmd_list
    if command == "submit":
        params = submit_params(args)
        if params is not None:
            return functools.partial(cmd_submit, params)
    return None


# ---- status ------------------------------------------------------------------------------------


def _is_task_ref(text: str) -> bool:
    """Whether TASK, as it will be sent, is a task id the models take (TaskRef)."""
    return 1 <= len(normalised(text)) <= ID_CHARS_MAX and _utf8(text)


def cmd_status(client: ApiClient, args: argparse.Namespace, out: TextIO) -> int:
    answer = client.call_plain("task.get", {"task_id": args.task})
    view = _task(client, "task.get", answer.value)
    if args.json:
        out.write(_json_text(answer) + "\n")
        return ExitCode.OK
    out.write("\n".join(status_lines(view, now=time.time())) + "\n")
    if view.result is not None:
        out.write("result (partial):\n" if view.partial else "result:\n")
        print_result(view, out)
    return ExitCode.OK


def print_result(view: TaskLike, out: TextIO) -> None:
    """The result on `out`: JSON when structured, else the text itself (escaped on a terminal)."""
    text = result_text(view, terminal=out.isatty())
    if text is not None:
        out.write(text)


# ---- list --------------------------------------------------------------------------------------


def list_params(args: argparse.Namespace) -> dict[str, Any] | None:
    """`task.list`'s params from the flags, or None when one is outside what ListParams takes."""
    schedule, trigger = getattr(args, "schedule", None), getattr(args, "trigger", None)
    if not 1 <= args.limit <= LIST_LIMIT_MAX:
        return None
    before = normalised(args.before) if args.before is not None else None  # as it will be sent
    for value in (before, schedule, trigger):
        if value is not None and not (1 <= len(value) <= ID_CHARS_MAX and _utf8(value)):
            return None
    return {
        "state": args.state or None,
        "limit": args.limit,
        "before": args.before,
        "schedule_id": schedule,
        "trigger": trigger,
    }


def terminal_width() -> int:
    """The terminal's width in cells ($COLUMNS first; 80 when stdout is not a terminal)."""
    return shutil.get_terminal_size().columns


def cmd_list(client: ApiClient, args: argparse.Namespace, out: TextIO) -> int:
    params = list_params(args)
    assert params is not None  # plain_runner checked the flags; --before resolved is no longer
    answer = client.call_plain("task.list", params)
    if not isinstance(answer.value, list):
        raise _wrong_shape(client, "task.list")
    views = [_task(client, "task.list", item) for item in answer.value]
    if args.json:
        for text in _json_items(answer):
            out.write(text + "\n")
        return ExitCode.OK
    if not views:
        out.write(_nothing(args) + "\n")
        return ExitCode.OK
    for line in list_lines(views, now=time.time(), width=terminal_width()):
        out.write(line + "\n")
    if len(views) == args.limit:
        last = short_ids(v.task_id for v in views)[views[-1].task_id]
        out.write(f"(more: agentd list --before {last})\n")
    return ExitCode.OK


def _nothing(args: argparse.Namespace) -> str:
    what = f"no {args.state} tasks" if args.state else "no tasks"
    if getattr(args, "schedule", None):
        what += f" of schedule {args.schedule}"
    if args.before:
        what += f" submitted before {args.before}"
    return what


# ---- submit ------------------------------------------------------------------------------------


def submit_params(args: argparse.Namespace) -> dict[str, Any] | None:
    """`task.submit`'s params from the flags, or None when the flags need the model path: a
    schedule, `--wait`/`--follow`, `--output-schema`, or a value the checks here cannot vouch for
    (the model path then names the flag and what is wrong with it)."""
    if args.wait or args.follow or args.output_schema is not None:
        return None
    if any(getattr(args, name, None) not in (None, False) for name in SCHEDULE_FLAGS):
        return None
    deadline_s = _deadline_s(args.deadline)
    key = args.idempotency_key or None
    texts = [args.instruction, *args.mcp, *args.approve, *(t for t in (args.model, key) if t is not None)]
    checks = (
        1 <= len(args.instruction) <= INSTRUCTION_MAX,
        args.model is None or _is_name(args.model),
        len(args.mcp) <= NAMES_MAX and all(_is_name(name) for name in args.mcp),
        len(args.approve) <= NAMES_MAX and all(1 <= len(p) <= APPROVE_CHARS_MAX for p in args.approve),
        args.max_steps is None or 1 <= args.max_steps <= MAX_STEPS,
        args.max_tokens is None or args.max_tokens >= 1,
        args.max_cost is None or 0 < args.max_cost <= MAX_COST,
        args.deadline is None or deadline_s is not None,
        key is None or len(key) <= IDEMPOTENCY_KEY_MAX,
        all(_utf8(text) for text in texts),
    )
    if not all(checks):
        return None
    limits = {"max_steps": args.max_steps, "max_tokens": args.max_tokens, "deadline_s": deadline_s}
    spec = {
        "instruction": args.instruction,
        "model": args.model,
        "mcp": list(args.mcp),
        "limits": {**limits, "max_cost": args.max_cost},
        "approve": list(args.approve),
        "on_budget": args.on_budget,
    }
    return {"spec": spec, "idempotency_key": key}


def _deadline_s(text: str | None) -> float | None:
    """--deadline in seconds when it is one the models take, else None."""
    if text is None:
        return None
    from agentd.config.duration import DurationError, parse_duration

    try:
        seconds = parse_duration(text)
    except DurationError:
        return None
    return seconds if 0 < seconds <= DEADLINE_MAX_S else None


def _is_name(text: str) -> bool:
    return len(text) <= NAME_CHARS_MAX and NAME.fullmatch(text) is not None


def _utf8(text: str) -> bool:
    """Whether `text` can be sent (an argument that is not UTF-8 holds surrogates)."""
    try:
        text.encode()
    except UnicodeEncodeError:
        return False
    return True


def cmd_submit(params: dict[str, Any], client: ApiClient, args: argparse.Namespace, out: TextIO) -> int:
    answer = client.call_plain("task.submit", params)
    task_id = answer.value.get("task_id") if isinstance(answer.value, dict) else None
    if not isinstance(task_id, str):
        raise _wrong_shape(client, "task.submit")
    out.write((_json_text(answer) if args.json else task_id) + "\n")
    return ExitCode.OK


# ---- the daemon's JSON ------------------------------------------------------------------------


def _task(client: ApiClient, method: str, value: object) -> TaskFacts:
    try:
        return task_facts(value)
    except ShapeError:
        raise _wrong_shape(client, method) from None


def _wrong_shape(client: ApiClient, method: str) -> ApiClientError:
    client.close()
    return ApiClientError(BAD_RESPONSE, f"agentd at {client.path} sent a {method} result of the wrong shape")


def _json_text(answer: PlainResult) -> str:
    """The result as `--json` prints it: the daemon's own text (the model's `model_dump_json`)."""
    if answer.text is not None:
        return answer.text
    return json.dumps(answer.value, ensure_ascii=False, separators=(",", ":"))


def _json_items(answer: PlainResult) -> list[str]:
    """Each item of a list result as `--json` prints it: its own text in the daemon's."""
    if answer.text is not None:
        items = json_items(answer.text)
        if items is not None:
            return items
    return [json.dumps(item, ensure_ascii=False, separators=(",", ":")) for item in answer.value]


def json_items(text: str) -> list[str] | None:
    """The text of each item of a compact JSON array, as written; None when `text` is not one."""
    decoder = json.JSONDecoder()
    items: list[str] = []
    try:
        if text[0] != "[":
            return None
        at = 1
        while text[at] != "]":
            _, end = decoder.raw_decode(text, at)
            items.append(text[at:end])
            at = end + 1 if text[end] == "," else end
    except (ValueError, IndexError):
        return None
    return items if at == len(text) - 1 else None
