"""`agentd config validate`'s check of approval gates against the tools each server lists.

A server with a `tools` allow-list is checked without connecting (`agentd.config.check`). Any
other server with an approval pattern is connected once, by a helper process (`python -m
subagent.list_tools`: the daemon's code may not import `mcp`), and each pattern must match one of
the tools it lists. A server that cannot be reached is a note saying its gates were not checked,
not an error: validating on a machine that cannot reach it says nothing about the file.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from collections.abc import Sequence

from agentd.config.check import gate_problems, gates_to_probe
from agentd.config.load import Inspection
from agentd.config.secrets import SecretUnavailable
from agentd.config.servers import TOKEN_DIR_NAME
from agentd.errors import ConfigProblem
from protocol.spawn import REVEAL_SECRETS, McpServerSpec

HELPER = [sys.executable, "-I", "-m", "subagent.list_tools"]
# Beyond the slowest server's connect_timeout_s: the helper's start-up (importing the SDK) and
# the servers' shutdown ladders.
HELPER_GRACE_S = 30.0

# A server's tool names, or why it could not be reached.
Listing = list[str] | str


def check_gates(found: Inspection, *, connect: bool) -> tuple[list[ConfigProblem], list[str]]:
    """Problems for approval patterns that match none of their server's tools, and notes for the
    servers whose gates could not be checked. `connect` False (`--no-env`) starts no server."""
    names = [n for n in gates_to_probe(found.servers) if not _reported(found.problems, f"mcp.{n}")]
    if not names:
        return [], []
    if not connect:
        return [], [f"mcp.{n}.approval: not checked against the server's tools (--no-env)" for n in names]
    specs: list[McpServerSpec] = []
    for name in names:
        try:
            specs.append(found.servers[name].spec(found.environ, token_dir=found.state_dir / TOKEN_DIR_NAME))
        except SecretUnavailable:
            continue  # reported with the environment's problems
    listings = list_tools(specs)
    problems: list[ConfigProblem] = []
    notes: list[str] = []
    for spec in specs:
        key = f"mcp.{spec.name}"
        listing = listings.get(spec.name, "no answer from the helper")
        if isinstance(listing, str):
            notes.append(f"{key}.approval: not checked: the server could not be reached ({listing})")
        else:
            patterns = found.servers[spec.name].section.approval
            problems += gate_problems(key, patterns, listing, "the server lists")
    return problems, notes


def _reported(problems: Sequence[ConfigProblem], key: str) -> bool:
    return any(p.key == key or p.key.startswith((f"{key}.", f"{key}[")) for p in problems)


def list_tools(specs: Sequence[McpServerSpec]) -> dict[str, Listing]:
    """Each server's tool names, or why it could not be reached, from one run of the helper."""
    if not specs:
        return {}
    body = ("[" + ",".join(s.model_dump_json(context=REVEAL_SECRETS) for s in specs) + "]").encode()
    timeout_s = max(s.connect_timeout_s for s in specs) + HELPER_GRACE_S
    read_fd, write_fd = os.pipe()
    try:
        helper = subprocess.Popen(
            [*HELPER, "--spec-fd", str(read_fd)],
            pass_fds=(read_fd,),
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            start_new_session=True,  # its stdio servers go with it on a timeout
        )
    except OSError as exc:
        os.close(write_fd)
        return dict.fromkeys((s.name for s in specs), f"cannot start the helper: {exc}")
    finally:
        os.close(read_fd)
    with os.fdopen(write_fd, "wb") as pipe:
        try:
            pipe.write(body)
        except BrokenPipeError:
            pass  # the helper exited already; its status says why
    try:
        out, err = helper.communicate(timeout=timeout_s)
    except subprocess.TimeoutExpired:
        os.killpg(helper.pid, signal.SIGKILL)
        helper.communicate()
        return dict.fromkeys((s.name for s in specs), f"no answer within {timeout_s:g} s")
    return _parse(out, err, helper.returncode, [s.name for s in specs])


def _parse(out: bytes, err: bytes, code: int, names: list[str]) -> dict[str, Listing]:
    try:
        found = json.loads(out) if code == 0 else None
    except ValueError:
        found = None
    if not isinstance(found, dict):
        why = (err.decode(errors="replace").strip().splitlines() or [f"exit {code}"])[-1][:200]
        return dict.fromkeys(names, f"the helper failed: {why}")
    listings: dict[str, Listing] = {}
    for name in names:
        entry = found.get(name)
        tools = entry.get("tools") if isinstance(entry, dict) else None
        if isinstance(tools, list) and all(isinstance(t, str) for t in tools):
            listings[name] = tools
        else:
            error = entry.get("error") if isinstance(entry, dict) else None
            listings[name] = str(error) if error else "no answer from the helper"
    return listings
