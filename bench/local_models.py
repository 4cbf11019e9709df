"""Local-model failure modes: a reply that stalls mid-way, and models that write tool
calls as prose.

1. Stall to exit: `agentd run` against the fake OpenAI-compatible server, which sends the headers
   and half of every reply's body, then nothing. With the default timeouts (`read_idle_timeout_s`
   30 s, a stall retried once) the task must end with the intelligence abort (exit 4) in well
   under two minutes. `--smoke` uses a 0.5 s read-idle bound instead.
2. Prose instead of tool calls: N generated tasks on one daemon; the fake model ignores the
   `tools` field and writes its call as prose — a fenced JSON object, a Hermes `<tool_call>`, a
   ReAct object, stray braces, or only the tool's name — then, once the run has switched to JSON
   actions, answers with actions wrapped in prose. A task counts when it completes with the
   token only the tool's result told the model. Target: 100 %.

Prints a table and writes JSON.

    .venv/bin/python -m bench.local_models [--tasks 50] [--smoke] [--out bench/results/local_models.json]
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import random
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from tests.support.daemon import running_daemon  # noqa: E402
from tests.support.fake_llm import Behaviour, FakeLLM, Recorded, Respond, chat, stall_midway  # noqa: E402

RESULTS = REPO / "bench" / "results" / "local_models.json"
STALL_BOUND_S = 120.0
TOOL = "note_write"
TASK = re.compile(r"Task (\d+):")


# ---- 1. stall to exit ----------------------------------------------------------------------


def stall_to_exit(smoke: bool) -> dict[str, Any]:
    extra = "read_idle_timeout_s = 0.5\n" if smoke else ""
    with (
        FakeLLM(default=stall_midway(chat("a reply whose second half never comes"))) as fake,
        tempfile.TemporaryDirectory(prefix="agentd-bench-") as tmp,
    ):
        config = Path(tmp) / "agentd.toml"
        config.write_text(
            f'[intelligence.local]\nkind = "openai"\nbase_url = "{fake.base_url}"\nmodel = "local"\n{extra}'
        )
        started = time.monotonic()
        done = subprocess.run(
            [sys.executable, "-m", "agentd", "run", "--config", str(config), "--model", "local", "say hi"],
            capture_output=True,
            text=True,
            timeout=600,
            cwd=REPO,
        )
        elapsed = time.monotonic() - started
        attempts = len(fake.requests)
    return {"exit_code": done.returncode, "seconds": round(elapsed, 1), "attempts": attempts}


# ---- 2. prose instead of tool calls --------------------------------------------------------


def token(task: int) -> str:
    return f"tok-{task * 7919 % 100_003}"


def prose_call(task: int, rng: random.Random) -> str:
    """The first reply of task `task`: a tool call written as text in one of the shapes small
    models use, with prose, stray braces and fences around it."""
    arguments = {"text": f"saving {token(task)}"}
    noise = rng.choice(["", "Hmm { this is odd. ", "Plan: {1) save, 2) report}. ", "Note: `{}` is empty. "])
    shapes = [
        f"{noise}I'll save it.\n```json\n{json.dumps({'name': TOOL, 'arguments': arguments})}\n```",
        f"{noise}<tool_call>\n{json.dumps({'name': TOOL, 'arguments': json.dumps(arguments)})}\n</tool_call>",
        f"{noise}Thought: save first.\n{json.dumps({'action': TOOL, 'action_input': arguments}, indent=2)}",
        f"{noise}{json.dumps({'tool': TOOL, 'arguments': arguments})} -- that should do it {{maybe}}",
        f"{noise}To do this I will use {TOOL} with the text, then report back.",
    ]
    return shapes[task % len(shapes)]


def json_action(obj: dict[str, Any], rng: random.Random) -> str:
    before = rng.choice(["", "Sure { here:\n", "OK.\n```json\n", "Thinking {a} then:\n"])
    after = "\n```" if "```" in before else rng.choice(["", " }", " Done."])
    return f"{before}{json.dumps(obj)}{after}"


def reply_to(request: Recorded) -> Behaviour:
    body = request.json
    assert isinstance(body, dict)
    messages = body["messages"]
    assert isinstance(messages, list)
    text = " ".join(str(m.get("content") or "") for m in messages if isinstance(m, dict))
    found = TASK.search(text)
    task = int(found.group(1)) if found else 0
    rng = random.Random(task * 1_000 + len(messages))
    last = str(messages[-1].get("content") or "") if isinstance(messages[-1], dict) else ""
    if "tools" in body:
        return chat(prose_call(task, rng))  # this model never makes a native tool call
    if last.startswith(f"Result of tool `{TOOL}`"):
        return chat(json_action({"action": "final", "result": f"saved {token(task)}"}, rng))
    # JSON actions: call the tool (again after any re-ask).
    return chat(
        json_action({"action": "tool", "tool": TOOL, "arguments": {"text": f"saving {token(task)}"}}, rng)
    )


def prose_tasks(count: int, workdir: Path) -> dict[str, Any]:
    with FakeLLM(default=Respond(reply_to)) as fake:
        body = (
            f'[defaults]\nmodel = "local"\n[intelligence.local]\nkind = "openai"\n'
            f'base_url = "{fake.base_url}"\nmodel = "local"\n'
            # The default liveness settings, not the test suite's fast ones: a loaded machine
            # must not get a child killed as unresponsive.
            "[supervision]\n"
        )
        started = time.monotonic()
        with running_daemon(workdir, body) as daemon:
            ids = [daemon.submit(f"Task {i}: save a note, then report what you saved.") for i in range(count)]
            views = [daemon.wait(task_id, timeout_s=300) for task_id in ids]
        elapsed = time.monotonic() - started
    completed = [
        i
        for i, view in enumerate(views)
        if view.status is not None and view.status.value == "completed" and view.result == f"saved {token(i)}"
    ]
    failures = {
        i: f"{view.status.value if view.status else view.state} ({view.abort}, {view.error}): "
        f"{str(view.result)[:80]}"
        for i, view in enumerate(views)
        if i not in completed
    }
    return {
        "tasks": count,
        "completed": len(completed),
        "fraction": round(len(completed) / count, 3),
        "seconds": round(elapsed, 1),
        "model_requests": len(fake.requests),
        "failures": failures,
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--tasks", type=int, default=50)
    parser.add_argument("--smoke", action="store_true", help="a 0.5 s stall bound and 5 tasks (CI)")
    parser.add_argument("--out", type=Path, default=RESULTS)
    args = parser.parse_args()
    count = 5 if args.smoke else args.tasks
    stall = stall_to_exit(args.smoke)
    with tempfile.TemporaryDirectory(prefix="agentd-bench-") as tmp:
        prose = prose_tasks(count, Path(tmp))
    bound = 5.0 if args.smoke else STALL_BOUND_S
    rows = [
        (
            "stall mid-body -> exit (defaults)" if not args.smoke else "stall mid-body -> exit (0.5 s bound)",
            f"{stall['seconds']} s, exit {stall['exit_code']}, {stall['attempts']} attempts",
            f"exit 4, < {bound:g} s" if not args.smoke else "exit 4",
            "ok" if stall["exit_code"] == 4 and (args.smoke or stall["seconds"] < bound) else "MISS",
        ),
        (
            f"prose instead of tool calls: tasks completed of {count}",
            f"{prose['completed']} ({prose['fraction']:.0%}) in {prose['seconds']} s",
            "100%",
            "ok" if prose["completed"] == count else "MISS",
        ),
    ]
    mode = "smoke" if args.smoke else "default"
    print(f"agentd local-model bench, {mode}; {os.cpu_count()} CPUs")
    width = max(len(r[0]) for r in rows)
    for figure, value, target, verdict in rows:
        print(f"{figure:<{width}}  {value:>36}  {target:<16} {verdict}")
    for task, why in prose["failures"].items():
        print(f"  task {task}: {why}")
    args.out.parent.mkdir(parents=True, exist_ok=True)
    document = {
        "benchmark": "local_models",
        "mode": mode,
        "machine": {"cpus": os.cpu_count(), "python": platform.python_version()},
        "stall_to_exit": stall,
        "prose_tool_calls": prose,
        "table": [dict(zip(("figure", "value", "target", "verdict"), r, strict=True)) for r in rows],
    }
    args.out.write_text(json.dumps(document, indent=2) + "\n")
    print(f"wrote {args.out}")
    return 0 if all(r[3] == "ok" for r in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
