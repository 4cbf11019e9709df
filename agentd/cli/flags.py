"""Flag values read into what the API takes, before anything is sent: the task spec and the
schedule of `submit` (and `agentd run`'s spec), `extend`'s deadline, and the checks of the
commands that take an action and a name. A bad value is a `UsageError` naming the flag the
person typed: exit 2 whether or not a daemon runs."""

from __future__ import annotations

import argparse
import json
import time
from collections.abc import Callable
from pathlib import Path

from pydantic import ValidationError

from agentd.cli.flag_errors import TASK_FLAGS, flag_problem
from agentd.errors import UsageError as UsageError
from protocol.api import ScheduleSpec, SpecLimits, TaskSpec
from protocol.contract import OutputContract


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
            limits=SpecLimits(
                max_steps=args.max_steps,
                max_tokens=args.max_tokens,
                deadline_s=deadline_s,
                max_cost=getattr(args, "max_cost", None),
            ),
            approve=list(getattr(args, "approve", None) or []),
            on_budget=getattr(args, "on_budget", None),
        )
    except ValidationError as exc:
        raise UsageError(flag_problem(exc, TASK_FLAGS)) from None


SCHEDULE_FLAGS = (
    *("cron", "every", "loop", "tz", "interval", "max_runs"),
    *("missed", "overlap", "max_failures", "max_total_tokens", "daily_cost"),
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
    "daily_cost": "--daily-cost",
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
        "daily_cost": args.daily_cost,
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


def preflight_submit(args: argparse.Namespace) -> None:
    """Check every flag before connecting: a bad value is exit 2 whether or not a daemon runs."""
    args.spec = spec_from_args(args, model=args.model, mcp=list(args.mcp))
    args.schedule = schedule_from_args(args)


def preflight_schedules(args: argparse.Namespace) -> None:
    if args.action is not None and not args.schedule:
        raise UsageError(f"{args.action} needs a schedule ID")
    if args.action is None and args.schedule:
        raise UsageError("give an action (show, pause, resume, delete) before the schedule ID")


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
