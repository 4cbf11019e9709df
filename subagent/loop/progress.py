"""Progress and repetition detectors (docs/loop.md, "Repeats and progress"): content hashes, no model calls.

`repeat_key` identifies a call by tool and canonical arguments; `turn_signature` hashes what a
turn produced (tool results, errors included, and the assistant's text). An unchanged
signature is an idle turn; `idle_limit` idle turns in a row is `stalled`.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterable, Mapping
from dataclasses import replace

from pydantic import JsonValue

from subagent.loop.state import LoopState, RepeatEntry
from subagent.messages import ToolOutcome


def _h(data: bytes) -> str:
    return hashlib.blake2b(data, digest_size=16).hexdigest()


def canonical_json(value: JsonValue) -> str:
    return json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False)


def repeat_key(name: str, arguments: Mapping[str, JsonValue] | None, raw: str = "") -> str:
    """hash(tool name + canonicalised arguments); malformed arguments hash their raw text."""
    body = canonical_json(dict(arguments)) if arguments is not None else "raw:" + raw
    return _h(f"{name}\x00{body}".encode())


def outcome_digest(outcome: ToolOutcome) -> str:
    return _h(f"{int(outcome.is_error)}\x00{outcome.text}".encode())


def turn_signature(assistant_text: str, observations: Iterable[str]) -> str:
    """The per-turn progress signature: every new observation's digest, then the assistant text."""
    h = hashlib.blake2b(digest_size=16)
    for obs in observations:
        h.update(_h(obs.encode()).encode())
    h.update(_h(assistant_text.encode()).encode())
    return h.hexdigest()


def record_signature(state: LoopState, signature: str | None) -> LoopState:
    """Advance the idle counter. `None` means the turn produced nothing new (malformed output)."""
    if signature is None or signature == state.last_signature:
        return replace(state, idle_turns=state.idle_turns + 1)
    return replace(state, idle_turns=0, last_signature=signature)


def bump_repeat(repeats: Mapping[str, RepeatEntry], key: str) -> tuple[dict[str, RepeatEntry], int]:
    """Count one more call for `key`; return the new map and the count (refuse when > cap)."""
    entry = repeats.get(key, RepeatEntry(count=0))
    updated = dict(repeats)
    updated[key] = replace(entry, count=entry.count + 1)
    return updated, entry.count + 1


def settle_repeat(
    repeats: Mapping[str, RepeatEntry], key: str, outcome: ToolOutcome
) -> dict[str, RepeatEntry]:
    """After execution: a successful call whose result changed made progress, so its count resets.

    Failing calls never reset: identical failing calls must reach `loop_detected`.
    """
    digest = outcome_digest(outcome)
    entry = repeats.get(key, RepeatEntry(count=1))
    progressed = not outcome.is_error and entry.last_digest is not None and entry.last_digest != digest
    updated = dict(repeats)
    updated[key] = RepeatEntry(count=1 if progressed else entry.count, last_digest=digest)
    return updated
