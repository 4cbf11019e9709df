"""Everyday tasks through `agentd run` against a real model on any OpenAI-compatible endpoint.

Each task of `bench/real_tasks.py` — arithmetic, one tool call, reading a file and reporting its
fields under an output schema, listing a directory and counting, the memory server's
create-then-query, a two-step chain, a task that must be refused, … — runs `--repeat` times, each
in a fresh directory with its own config (the endpoint, and the npm reference MCP servers it
needs: `npm ci --prefix tests/npm` installs them). Prints the pass rate per task with mean steps,
tokens and seconds, and writes JSON with every run and the machine's load.

    .venv/bin/python -m bench.real_models --intelligence http://127.0.0.1:8089/v1 --model local \\
        [--tasks arithmetic,sum_tool] [--repeat 3] [--out bench/results/real_models.json]

`--agentd CMD` runs another agentd (another checkout's venv: `/path/.venv/bin/agentd`) to
compare two versions on the same endpoint. docs/models.md has the rig and the figures.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shlex
import shutil
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from statistics import mean
from typing import Any

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from bench.real_tasks import BY_NAME, SERVERS, Outcome, Task  # noqa: E402

RESULTS = REPO / "bench" / "results" / "real_models.json"
NPM_PACKAGES = REPO / "tests" / "npm" / "node_modules" / "@modelcontextprotocol"
# Slack past the task's own deadline before the run is killed from here.
KILL_SLACK_S = 60.0
# `--via daemon`: how long `agentd serve` may take to listen, and to drain on SIGTERM.
DAEMON_START_S = 60.0
DAEMON_STOP_S = 40.0


def server_argv(package: str, directory: Path) -> list[str]:
    """The stdio command of an npm reference server (the filesystem one rooted at `directory`)."""
    node = shutil.which("node")
    script = NPM_PACKAGES / package / "dist" / "index.js"
    if node is None or not script.is_file():
        raise SystemExit(
            f"real_models: {package} is not installed: run `npm ci --prefix {REPO / 'tests' / 'npm'}`"
        )
    extra = (
        [str(directory)]
        if package == "server-filesystem"
        else ["stdio"]
        if package == "server-everything"
        else []
    )
    return [node, str(script), *extra]


def config_text(args: argparse.Namespace, task: Task, directory: Path) -> str:
    # A kept log is at debug level: `agentd run` is told so by its flags, the daemon by its config.
    daemon = ["[daemon]", 'log_level = "debug"'] if args.logs is not None and args.via == "daemon" else []
    lines = [
        *daemon,
        "[intelligence.bench]",
        'kind = "openai"',
        f"base_url = {json.dumps(args.intelligence)}",
        f"model = {json.dumps(args.model)}",
        f"context_window = {args.context_window}",
        # A CPU-only server may think for minutes before its first byte.
        f"request_timeout_s = {args.deadline_s}",
        f"read_idle_timeout_s = {args.deadline_s}",
    ]
    if args.tool_mode:
        lines.append(f"tool_mode = {json.dumps(args.tool_mode)}")
    if args.temperature is not None:
        lines.append(f"temperature = {args.temperature:g}")
    for name in task.servers:
        package, tools = SERVERS[name]
        lines += [
            f"[mcp.{name}]",
            f"command = {json.dumps(server_argv(package, directory))}",
            f"tools = {json.dumps(list(tools))}",
            "trust = []",
        ]
        if package == "server-memory":
            lines.append(f"env = {{ MEMORY_FILE_PATH = {json.dumps(str(directory / 'memory.jsonl'))} }}")
    return "\n".join(lines) + "\n"


def run_once(args: argparse.Namespace, task: Task) -> dict[str, Any]:
    with tempfile.TemporaryDirectory(prefix=f"agentd-real-{task.name}-") as tmp:
        directory = Path(tmp) / "work"
        directory.mkdir()
        instruction = task.prepare(directory)
        config = Path(tmp) / "agentd.toml"
        config.write_text(config_text(args, task, directory))
        options = ["--config", str(config), "--model", "bench", "--max-steps", str(task.max_steps)]
        options += ["--deadline", f"{args.deadline_s:g}s"]
        for name in task.servers:
            options += ["--mcp", name]
        if task.schema is not None:
            schema = Path(tmp) / "schema.json"
            schema.write_text(json.dumps(task.schema))
            options += ["--output-schema", str(schema)]
        started = time.monotonic()
        if args.via == "daemon":
            exit_code, stdout, stderr = through_daemon(args, Path(tmp), [*options, "--wait", instruction])
        else:
            logging = ["--log-content", "--log-level", "debug"] if args.logs is not None else []
            argv = [*args.agentd, "run", *options, *logging, instruction]
            exit_code, stdout, stderr = command(args, argv, tmp)
        seconds = time.monotonic() - started
        if args.logs is not None:
            keep_log(args.logs, task.name, stderr)
        outcome = outcome_of(exit_code, stdout.strip(), stderr, seconds)
        passed = task.check(outcome, directory)
    return {
        "passed": passed,
        "status": outcome.status,
        "exit_code": outcome.exit_code,
        "steps": outcome.steps,
        "tokens": outcome.tokens,
        "seconds": round(outcome.seconds, 1),
        "error": outcome.error,
        "result": outcome.stdout[:500],
    }


def keep_log(logs: Path, name: str, stderr: str) -> None:
    """The run's log (prompts, replies, tool payloads) as `LOGS/TASK-N.log`, N counting from 1."""
    logs.mkdir(parents=True, exist_ok=True)
    n = 1
    while (logs / f"{name}-{n}.log").exists():
        n += 1
    (logs / f"{name}-{n}.log").write_text(stderr)


def command(args: argparse.Namespace, argv: list[str], cwd: str) -> tuple[int, str, str]:
    """Exit code, stdout and stderr of `argv`, killed past the task's deadline and its slack."""
    try:
        done = subprocess.run(
            argv, capture_output=True, text=True, timeout=args.deadline_s + KILL_SLACK_S, cwd=cwd
        )
    except subprocess.TimeoutExpired as exc:
        return -9, _text(exc.stdout), _text(exc.stderr)
    return done.returncode, done.stdout, done.stderr


def through_daemon(args: argparse.Namespace, tmp: Path, submit: list[str]) -> tuple[int, str, str]:
    """`agentd submit --wait` to an `agentd serve` of the run's own config, socket and state; the
    daemon's log stands in for `run`'s stderr (it carries the subagent's `loop.final`)."""
    socket_path, log_path = tmp / "agentd.sock", tmp / "daemon.log"
    serve = [*args.agentd, "serve", "--config", submit[1], "--socket", str(socket_path)]
    serve += ["--state-dir", str(tmp / "state"), "--log-format", "json"]
    if args.logs is not None:
        serve.append("--log-content")  # and `log_level = "debug"` in its config (`config_text`)
    with log_path.open("w") as log:
        daemon = subprocess.Popen(serve, stdout=subprocess.DEVNULL, stderr=log, cwd=tmp)
        try:
            if not listening(socket_path, daemon):
                return daemon.wait(), "", log_path.read_text()
            argv = [*args.agentd, "submit", "--socket", str(socket_path), *submit[2:]]
            exit_code, stdout, stderr = command(args, argv, str(tmp))
        finally:
            stop(daemon)
    return exit_code, stdout, stderr + log_path.read_text()


def listening(socket_path: Path, daemon: subprocess.Popen[bytes]) -> bool:
    """Whether the daemon accepts connections within DAEMON_START_S (False: it exited or hung)."""
    deadline = time.monotonic() + DAEMON_START_S
    while time.monotonic() < deadline and daemon.poll() is None:
        with socket.socket(socket.AF_UNIX) as probe:
            try:
                probe.connect(str(socket_path))
                return True
            except OSError:
                time.sleep(0.2)
    return False


def stop(daemon: subprocess.Popen[bytes]) -> None:
    """SIGTERM, the drain's time, then SIGKILL."""
    if daemon.poll() is None:
        daemon.terminate()
        try:
            daemon.wait(timeout=DAEMON_STOP_S)
        except subprocess.TimeoutExpired:
            daemon.kill()
            daemon.wait()


def _text(value: str | bytes | None) -> str:
    if isinstance(value, bytes):
        return value.decode(errors="replace")
    return value or ""


def outcome_of(exit_code: int, stdout: str, stderr: str, seconds: float) -> Outcome:
    """The root's `loop.final` event (status, steps, tokens) read back from the run's JSON log lines."""
    final: dict[str, Any] = {}
    for line in stderr.splitlines():
        if line.startswith("{"):
            try:
                event = json.loads(line)
            except ValueError:
                continue
            # The root's, not a nested subagent's (the model may spawn one).
            if event.get("event") == "loop.final" and str(event.get("handle", "0")) == "0":
                final = event
    status = str(final.get("status") or ("killed" if exit_code == -9 else "unknown"))
    # Without a `loop.final` the command's own outcome line (the one line not JSON) says why.
    said = [line for line in stderr.splitlines() if line.strip() and not line.startswith("{")]
    error = final.get("error") or final.get("abort") or (said[-1][:500] if said and not final else None)
    return Outcome(
        exit_code=exit_code,
        status=status,
        stdout=stdout,
        steps=int(final.get("steps") or 0),
        tokens=int(final.get("tokens") or 0),
        seconds=seconds,
        error=str(error) if error else None,
    )


def summary(runs: list[dict[str, Any]]) -> dict[str, Any]:
    return {
        "pass_rate": round(sum(r["passed"] for r in runs) / len(runs), 3),
        "mean_steps": round(mean(r["steps"] for r in runs), 1),
        "mean_tokens": round(mean(r["tokens"] for r in runs)),
        "mean_seconds": round(mean(r["seconds"] for r in runs), 1),
    }


def machine() -> dict[str, Any]:
    load1, load5, load15 = os.getloadavg()
    return {
        "platform": platform.platform(),
        "cpus": os.cpu_count(),
        "load_avg": [round(load1, 2), round(load5, 2), round(load15, 2)],
    }


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m bench.real_models", description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--intelligence", required=True, help="OpenAI-compatible base URL (http://host:port/v1)"
    )
    parser.add_argument("--model", required=True, help="the model name the endpoint serves")
    parser.add_argument(
        "--tasks", default="", help=f"comma-separated task names (default: all: {', '.join(BY_NAME)})"
    )
    parser.add_argument("--repeat", type=int, default=3, help="runs per task (default 3)")
    parser.add_argument("--context-window", type=int, default=4096, help="the server's context in tokens")
    parser.add_argument("--deadline-s", type=float, default=600.0, help="each run's deadline (default 600)")
    parser.add_argument(
        "--tool-mode",
        choices=("auto", "native", "json"),
        default="",
        help="the endpoint's `tool_mode` key (default: unset, agentd's default)",
    )
    parser.add_argument(
        "--temperature",
        type=float,
        default=None,
        help="the endpoint's `temperature` key (default: unset, the server's own; older agentd lacks it)",
    )
    parser.add_argument(
        "--agentd", default="", help="the agentd command to run (default: this interpreter's)"
    )
    parser.add_argument(
        "--via",
        choices=("run", "daemon"),
        default="run",
        help="`run`: each task through `agentd run`; `daemon`: through `agentd serve` and "
        "`agentd submit --wait` (default run)",
    )
    parser.add_argument("--label", default="", help="a word for this measurement in the JSON (e.g. before)")
    parser.add_argument(
        "--logs",
        type=Path,
        default=None,
        help="keep each run's log, with prompts, replies and tool payloads, as LOGS/TASK-N.log "
        "(the runs log at debug level with --log-content)",
    )
    parser.add_argument("--out", type=Path, default=RESULTS, help="where to write the JSON")
    args = parser.parse_args(argv)
    names = [n.strip() for n in args.tasks.split(",") if n.strip()] or list(BY_NAME)
    unknown = [n for n in names if n not in BY_NAME]
    if unknown:
        parser.error(f"--tasks: unknown task {', '.join(unknown)} (known: {', '.join(BY_NAME)})")
    if args.repeat < 1:
        parser.error("--repeat must be at least 1")
    args.selected = [BY_NAME[n] for n in names]
    args.agentd = shlex.split(args.agentd) if args.agentd else [sys.executable, "-m", "agentd"]
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    results: dict[str, Any] = {
        "label": args.label,
        "started": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
        "intelligence": args.intelligence,
        "model": args.model,
        "tool_mode": args.tool_mode or "auto",
        "temperature": args.temperature,
        "via": args.via,
        "repeat": args.repeat,
        "context_window": args.context_window,
        "machine_before": machine(),
        "tasks": {},
    }
    tasks: dict[str, Any] = results["tasks"]
    print(f"{'task':<18} {'pass':>6} {'steps':>6} {'tokens':>7} {'seconds':>8}  statuses", flush=True)
    for task in args.selected:
        runs = [run_once(args, task) for _ in range(args.repeat)]
        tasks[task.name] = {**summary(runs), "runs": runs}
        row = tasks[task.name]
        statuses = ",".join(r["status"] + ("" if r["passed"] else "✗") for r in runs)
        print(
            f"{task.name:<18} {row['pass_rate']:>6.0%} {row['mean_steps']:>6} {row['mean_tokens']:>7} "
            f"{row['mean_seconds']:>8}  {statuses}",
            flush=True,
        )
        write(args.out, results)  # after every task: a long run can be read while it goes on
    every = [r for t in tasks.values() for r in t["runs"]]
    results["pass_rate"] = round(sum(r["passed"] for r in every) / len(every), 3)
    results["machine_after"] = machine()
    write(args.out, results)
    print(
        f"{'overall':<18} {results['pass_rate']:>6.0%}  ({sum(r['passed'] for r in every)}/{len(every)} runs)"
    )
    print(f"wrote {args.out}")
    return 0


def write(out: Path, results: dict[str, Any]) -> None:
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(results, indent=2) + "\n")


if __name__ == "__main__":
    sys.exit(main())
