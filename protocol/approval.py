"""The approval gate's shared rules: which tool calls wait for a person, how one call is
identified across runs, and what the model is told when a person said no.

Pure and shared by both processes: the subagent decides from its grant whether a call is gated;
the supervisor identifies a call by its digest, so a decision journaled before a restart is
honoured when the same call (same server, tool and arguments) comes back.
"""

from __future__ import annotations

import fnmatch
import hashlib
import json
from collections.abc import Iterable, Sequence
from typing import Literal

from pydantic import JsonValue

Outcome = Literal["approved", "denied", "timeout"]
# A gate pattern: a tool name glob (`delete_*`); a client's `--approve` may prefix a server glob
# (`github/merge_*`).
MAX_PATTERN = 200
MAX_PATTERNS = 64


def gated(patterns: Iterable[str], tool: str) -> bool:
    """Whether a call of `tool` (its name on its server) needs a person's approval."""
    return any(fnmatch.fnmatchcase(tool, pattern) for pattern in patterns)


def pattern_problem(pattern: str) -> str | None:
    """Why a gate pattern is unusable, or None."""
    if not pattern or len(pattern) > MAX_PATTERN:
        return f"an approval pattern must be 1 to {MAX_PATTERN} characters"
    if pattern != pattern.strip() or any(c in pattern for c in "\n\r\t"):
        return f"approval pattern {pattern!r} has surrounding or control whitespace"
    return None


def split_client_pattern(pattern: str) -> tuple[str, str]:
    """A client's `--approve` pattern as (server glob, tool glob): `fs/write_*`, or `delete_*` for
    every granted server."""
    server, sep, tool = pattern.partition("/")
    return (server, tool) if sep else ("*", pattern)


def client_gates(patterns: Sequence[str], server: str) -> list[str]:
    """The tool globs a client's patterns add to `server`'s gate."""
    added = []
    for pattern in patterns:
        server_glob, tool_glob = split_client_pattern(pattern)
        if fnmatch.fnmatchcase(server, server_glob):
            added.append(tool_glob)
    return added


def canonical_arguments(arguments: JsonValue) -> str:
    """Arguments as compact, key-sorted JSON: the same call always reads the same."""
    return json.dumps(arguments, sort_keys=True, separators=(",", ":"), ensure_ascii=False)


def call_digest(server: str, tool: str, arguments: JsonValue) -> str:
    """The identity of a call across runs: server, tool and arguments (not the model's call id)."""
    text = json.dumps([server, tool, canonical_arguments(arguments)], separators=(",", ":"))
    return hashlib.sha256(text.encode()).hexdigest()


def denial_text(wire_name: str, outcome: Outcome, reason: str | None, *, waited_s: float) -> str:
    """The `isError` observation of a call a person did not approve (it never reached the server)."""
    if outcome == "timeout":
        # The supervisor's reason counts the whole wait, across a park and resume of the task.
        why = f"{reason or f'nobody approved it within {waited_s:.0f} s'}, so it was denied"
    else:
        why = "a person denied it" + (f": {reason}" if reason else " (no reason given)")
    return (
        f"tool `{wire_name}` was not run: it needs a person's approval and {why}. The call never "
        "reached the server. Do not retry it unchanged; adapt your plan or finish without it."
    )
