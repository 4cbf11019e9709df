"""The commands over journaled transcripts (docs/durability.md). `agentd transcript TASK`: what a
task's model was asked and answered, and every tool call it made with its result (long bodies cut
unless `--full`; `--follow` keeps printing new steps until the task ends; `--json` prints each
journaled step as one exact JSON line). `agentd fork TASK --from-step N`: a new task that starts
from a copy of TASK's first N steps."""

from __future__ import annotations

import argparse
import json
from typing import TextIO

from agentd.api.client import ApiClient
from agentd.cli.display import cut, safe
from protocol.api import (
    ExtendParams,
    ExtendRequest,
    ForkParams,
    ForkRequest,
    TranscriptParams,
    TranscriptRequest,
    TranscriptStep,
    TranscriptView,
)
from protocol.exit_codes import ExitCode
from protocol.transcript import (
    OverflowItem,
    ReplyItem,
    ResultItem,
    RewindItem,
    StartItem,
    ToolsRejectedItem,
)

BODY_CHARS = 600
ARGUMENT_CHARS = 300
# A follower's wait per request (the daemon bounds it at 30 s).
FOLLOW_WAIT_S = 10.0


def cmd_transcript(client: ApiClient, args: argparse.Namespace, out: TextIO) -> int:
    after = 0
    first = True
    while True:
        params = TranscriptParams(
            task_id=args.task,
            handle=args.node,
            after_seq=after,
            wait_s=FOLLOW_WAIT_S if args.follow and not first else 0.0,
        )
        page = client.call(TranscriptRequest(params=params), timeout_s=FOLLOW_WAIT_S + 30.0)
        if first and not args.json:
            _header(page, out, full=args.full)
        first = False
        for step in page.steps:
            out.write(step.model_dump_json() + "\n" if args.json else render(step, full=args.full))
        out.flush()
        after = page.next_seq
        if page.more:
            continue
        if not args.follow or (page.state == "terminal" and not page.steps):
            return ExitCode.OK


def cmd_fork(client: ApiClient, args: argparse.Namespace, out: TextIO) -> int:
    params = ForkParams(
        task_id=args.task,
        from_step=args.from_step,
        model=args.model,
        instruction=args.instruction,
        idempotency_key=args.idempotency_key,
    )
    result = client.call(ForkRequest(params=params))
    if args.json:
        out.write(result.model_dump_json() + "\n")
    else:
        out.write(f"{result.task_id}  forked from {args.task} at step {args.from_step}\n")
    return ExitCode.OK


def cmd_extend(client: ApiClient, args: argparse.Namespace, out: TextIO) -> int:
    # `--deadline` was read as seconds by the command's preflight (`deadline_s`).
    params = ExtendParams(task_id=args.task, steps=args.steps, tokens=args.tokens, deadline_s=args.deadline_s)
    view = client.call(ExtendRequest(params=params))
    if args.json:
        out.write(view.model_dump_json() + "\n")
    else:
        out.write(f"{view.task_id}  extended: it goes on from its last step (queued)\n")
    return ExitCode.OK


def _header(page: TranscriptView, out: TextIO, *, full: bool) -> None:
    nodes = f" (nodes with a transcript: {', '.join(page.handles)})" if len(page.handles) > 1 else ""
    out.write(f"task {page.task_id}  node {page.handle}  {page.state}{nodes}\n")
    instruction = page.instruction if full else cut(page.instruction, BODY_CHARS)
    out.write(f"instruction:\n{_indent(safe(instruction))}\n")
    if not page.steps:
        out.write("(no steps journaled yet)\n")


def render(step: TranscriptStep, *, full: bool) -> str:
    """One journaled step as a person reads it (model and tool text made safe to print)."""
    item = step.item
    body = (lambda text: text) if full else (lambda text: cut(text, BODY_CHARS))
    head = f"#{step.seq} "
    if isinstance(item, ReplyItem):
        tokens = f", {item.tokens_in}+{item.tokens_out} tokens" if item.tokens_in is not None else ""
        lines = [f"{head}model ({item.purpose}{tokens})"]
        if item.refusal is not None:
            lines.append(_indent(f"refused: {safe(body(item.refusal))}"))
        elif item.malformed is not None:
            lines.append(_indent(f"unusable reply: {safe(body(item.malformed))}"))
        if item.text:
            lines.append(_indent(safe(body(item.text))))
        for call in item.tool_calls:
            arguments = call.raw_arguments or json.dumps(call.arguments, ensure_ascii=False)
            shown = arguments if full else cut(arguments, ARGUMENT_CHARS)
            lines.append(
                _indent(f"→ {safe(call.name, keep_newlines=False)} {safe(shown, keep_newlines=False)}")
            )
        return "\n".join(lines) + "\n"
    if isinstance(item, StartItem):
        return f"{head}▶ {safe(item.name, keep_newlines=False)} started\n"
    if isinstance(item, ResultItem):
        verdict = "error" if item.is_error else "ok"
        return f"{head}← {safe(item.name, keep_newlines=False)} {verdict}\n{_indent(safe(body(item.text)))}\n"
    if isinstance(item, OverflowItem):
        return f"{head}model: the request was over the context window (compacting, then asking again)\n"
    if isinstance(item, ToolsRejectedItem):
        return f"{head}model: the endpoint refused tools; JSON actions from here ({safe(item.detail)})\n"
    assert isinstance(item, RewindItem)
    return f"{head}resumed run went its own way after item {item.to}: {safe(item.why)}\n"


def _indent(text: str) -> str:
    return "\n".join("    " + line for line in text.splitlines() or [""])
