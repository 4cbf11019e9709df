"""A task's progress as a person reads it: one line per event that matters (`render_event`,
pure), and following a task live (`follow`) — what `submit --follow`, `logs` and `logs -f` print,
the same lines on a terminal and in a pipe. `--json` prints each event as one exact JSON line
instead. A person who stops following (Ctrl-C) is told the task goes on and how to reach it again.

Every field an event carries may hold text a model, a tool or a server wrote: each is printed
through `display.one_line`.
"""

from __future__ import annotations

from typing import TextIO

from pydantic import JsonValue

from agentd.api.client import ApiClient
from agentd.cli import approval_commands
from agentd.cli.display import one_line, plural
from protocol.api import EventsParams, EventsRequest, EventView, TaskView


def _int(value: JsonValue) -> int:
    return value if isinstance(value, int) else 0


def _t(value: JsonValue) -> str:
    """A field's value as one safe line (`?` when absent)."""
    return "?" if value is None else one_line(str(value))


def _spend_line(name: str, f: dict[str, JsonValue]) -> str:
    """A throttled wait, a provider's shared backoff, or an unmetered reply (docs/budgets.md)."""
    model = f"model {_t(f.get('endpoint'))}"
    if name == "intel.throttled":
        return f"  ⧗ {model}: waited {_t(f.get('wait_ms'))} ms for a slot ({_t(f.get('blocked_by'))})"
    if name == "intel.backoff":
        return f"  ⧗ {model}: the provider asked every task to wait {_t(f.get('hold_ms'))} ms"
    return f"  $ {model} reported no usage: counted at its maximum, ${_t(f.get('cost_usd'))}"


def render_event(event: EventView) -> str | None:
    """One human-readable progress line for an event, or None to skip it."""
    f = event.fields
    name = event.event
    if name == "loop.start":
        steps = plural(_int(f.get("max_steps")), "step")
        return f"▶ started (at most {steps}, {_t(f.get('max_tokens'))} tokens)"
    if name == "mcp.connect":
        tools = plural(_int(f.get("tools", 0)), "tool")
        return f"  MCP {_t(f.get('server'))}: {_t(f.get('outcome'))} ({tools})"
    if name == "tool.call":
        return f"  → {_t(f.get('tool'))}"
    if name == "mcp.progress":
        total = f.get("total")
        done = f"{_t(f.get('progress'))}/{_t(total)}" if total is not None else _t(f.get("progress"))
        message = f" {_t(f.get('message'))}" if f.get("message") else ""
        return f"  … {_t(f.get('server'))}/{_t(f.get('tool'))} {done}{message}"
    if name == "mcp.log" and f.get("level") not in ("debug", "info", "notice"):
        return f"  MCP {_t(f.get('server'))} {_t(f.get('level'))}: {_t(f.get('message'))}"
    if name == "tool.result":
        outcome = "error" if f.get("is_error") else "ok"
        return f"  ← {_t(f.get('tool'))} {outcome} ({_t(f.get('dur_ms'))} ms)"
    if name == "loop.step":
        tokens = _int(f.get("tokens_in")) + _int(f.get("tokens_out"))
        calls = plural(_int(f.get("tool_calls", 0)), "tool call")
        return f"step {_t(f.get('step'))} · {_t(f.get('kind'))} · {calls} · {plural(tokens, 'token')}"
    if name == "loop.error":
        return f"  ! {_t(f.get('kind'))}: {_t(f.get('detail'))}"
    if name == "intel.result" and f.get("outcome") not in ("ok", None):
        return (
            f"  model {_t(f.get('endpoint'))}: {_t(f.get('outcome'))} "
            f"(status {_t(f.get('status'))}, {_t(f.get('err'))})"
        )
    if name in ("intel.throttled", "intel.backoff", "intel.unmetered"):
        return _spend_line(name, f)
    if name == "loop.final":
        steps = plural(_int(f.get("steps")), "step")
        return f"■ {_t(f.get('status'))} after {steps}, {plural(_int(f.get('tokens')), 'token')}"
    if name == "task.paused":
        return f"⏸ {_t(f.get('status'))}: waiting for more budget (`agentd extend TASK --steps N`)"
    if name == "task.extended":
        return f"↑ extended to {plural(_int(f.get('max_steps')), 'step')}, {_t(f.get('max_tokens'))} tokens"
    if name == "task.parked" and f.get("call") is not None:
        return "⏸ parked while a call waits for approval: no slot held; it resumes once the call is decided"
    if name == "task.parked":
        return "⏸ parked: the daemon is stopping; the task resumes from its last step at the next start"
    if name == "task.resumed":
        node = f" node {_t(f.get('handle'))}" if f.get("handle") else ""
        return f"↻ resumed{node} from step {_t(f.get('from_step'))} (journaled steps replayed, not run again)"
    if name in ("subagent.stuck", "subagent.starved", "subagent.signal", "subagent.exit"):
        return _subagent_line(name, f)
    return approval_commands.render_approval(event)


# What a subagent starved of CPU is late with (`subagent.starved`'s `late`).
_LATE = {
    "not_ready": "is not ready yet",
    "unresponsive": "misses its pings",
    "wedged": "reports an event loop that stopped turning",
}


def _subagent_line(name: str, f: dict[str, JsonValue]) -> str:
    """What the supervisor saw of one subagent process: it exited, was starved or stuck, or was
    signalled."""
    who = f"subagent {_t(f.get('handle') or '0')} (pid {_t(f.get('pid'))})"
    if name == "subagent.exit":
        return f"  ⏹ {who} {_t(f.get('exit') or f.get('status'))}"
    if name == "subagent.starved":
        late = _LATE.get(str(f.get("late")), "misses its pings")
        return f"  … {who} {late} while starved of CPU (a loaded machine): given more time"
    if name == "subagent.stuck" and f.get("verdict") == "starved":
        return f"  ! {who} stayed starved of CPU past its grace: stopping it"
    if name == "subagent.stuck":
        return f"  ! {who} is stuck ({_t(f.get('verdict'))}): stopping it"
    return f"  ! {who}: {_t(f.get('rung') or f.get('signal'))} ({_t(f.get('cause') or f.get('reason'))})"


def follow(
    client: ApiClient,
    task_id: str,
    out: TextIO,
    *,
    json_lines: bool = False,
    decide: ApiClient | None = None,
    after_seq: int = 0,
) -> None:
    """Stream a task's events until it ends: readable lines, or JSON lines with `json_lines`.

    After a request for approval, a terminal with `decide` (a second connection: this one is
    busy streaming) is asked `approve? [y/N]`; anything else is told how to decide."""
    request = EventsRequest(params=EventsParams(task_id=task_id, follow=True, after_seq=after_seq))
    for item in client.stream(request):
        if isinstance(item, TaskView):
            return
        if json_lines:
            out.write(item.model_dump_json() + "\n")
            out.flush()
            continue
        line = render_event(item)
        if line is not None:
            out.write(line + "\n")
            out.flush()
        if item.event == "approval.requested":
            inp = approval_commands.prompt_input() if decide is not None else None
            approval_commands.ask(decide, task_id, item, out, inp=inp)


def detached(task_id: str, *, what: str = "following") -> str:
    """What a person who pressed Ctrl-C is told: the task goes on, and how to reach it."""
    return (
        f"\nstopped {what} {task_id}; the task goes on.\n"
        f"  agentd logs -f {task_id}    follow it again\n"
        f"  agentd cancel {task_id}     cancel it\n"
    )
