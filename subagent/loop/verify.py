"""The VERIFY gate (docs/loop.md, "VERIFY"): machine-checkable contract criteria only, never self-judgment.

A final answer passes when it is not vacuous (re-asked once, then accepted) and, for a JSON
contract, one reading of it as JSON validates against the schema (`protocol.contract`, the check
the supervisor also applies to a child's result). Models wrap JSON in code fences, in prose, or
in a JSON string; each of those readings is tried before the answer is judged. A failure is an
observation that names what is wrong and restates the schema; the loop continues and the failed
turn has consumed a step.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator, Mapping
from dataclasses import dataclass

from pydantic import JsonValue

from protocol.contract import result_errors
from subagent.loop.action import extract_json_object
from subagent.loop.state import Contract

_PUNCTUATION_ONLY = set(".,;:!?-_*'\"`()[]{}… \t\r\n")
# A fenced block: ``` or ~~~, an optional language tag, the body, the closing fence.
_FENCE = re.compile(r"(```|~~~)[ \t]*[\w.+-]*[ \t]*\r?\n(.*?)\r?\n?\1", re.DOTALL)
MAX_FENCES = 8
# A string holding JSON holding a string…: unwrapped at most this many times.
MAX_UNWRAP = 3
MAX_SCHEMA_CHARS = 4_000


def is_vacuous(text: str) -> bool:
    """Empty, whitespace, or punctuation only (a lone '.' is the classic vacuous final)."""
    return all(ch in _PUNCTUATION_ONLY for ch in text)


@dataclass(frozen=True, slots=True)
class Verified:
    result: JsonValue


@dataclass(frozen=True, slots=True)
class Rejected:
    observation: str
    # A parsed JSON value that failed the schema still counts as a usable partial.
    candidate: JsonValue = None


def _loads(text: str) -> tuple[bool, JsonValue]:
    try:
        value: JsonValue = json.loads(text)
    except ValueError:
        return False, None
    return True, value


def _text_readings(text: str) -> Iterator[JsonValue]:
    """The JSON values a text may mean, most literal first: the whole text, each fenced block,
    the first balanced object in prose."""
    ok, value = _loads(text.strip())
    if ok:
        yield value
    for n, match in enumerate(_FENCE.finditer(text)):
        if n == MAX_FENCES:
            break
        ok, value = _loads(match.group(2).strip())
        if ok:
            yield value
    obj = extract_json_object(text)
    if obj is not None:
        yield obj


def json_readings(result: JsonValue) -> list[JsonValue]:
    """Every reading of a final result as JSON, in preference order, without duplicates.

    A string is read as JSON text; a reading that is itself a string holding JSON (a model that
    wrapped its object in quotes) is unwrapped, up to `MAX_UNWRAP` times. An already-structured
    value (from a JSON action) is its own first reading.
    """
    readings: list[JsonValue] = []
    seen: set[str] = set()
    pending: list[tuple[JsonValue, int]] = (
        [(v, 0) for v in _text_readings(result)] if isinstance(result, str) else [(result, 0)]
    )
    while pending:
        value, depth = pending.pop(0)
        key = json.dumps(value, sort_keys=True)  # by encoding: `1 == True` in Python, not in JSON
        if key in seen:
            continue
        seen.add(key)
        readings.append(value)
        if isinstance(value, str) and depth < MAX_UNWRAP:
            pending[:0] = [(v, depth + 1) for v in _text_readings(value)]
    return readings


def _preferred(readings: list[JsonValue]) -> JsonValue:
    """The reading to report and keep as a partial: the first structured one, else the first."""
    return next((r for r in readings if not isinstance(r, str)), readings[0])


def parse_json_result(text: str) -> tuple[bool, JsonValue]:
    """Parse a final answer as JSON (fences, prose and string wrapping tolerated); (False, None)
    when no reading parses."""
    readings = json_readings(text)
    if not readings:
        return False, None
    return True, _preferred(readings)


def schema_reminder(contract: Contract) -> str:
    """The schema restated for a re-ask (cut at `MAX_SCHEMA_CHARS`), or "" without one."""
    if contract.schema is None:
        return ""
    rendered = json.dumps(contract.schema, sort_keys=True, ensure_ascii=False)
    if len(rendered) > MAX_SCHEMA_CHARS:
        rendered = rendered[:MAX_SCHEMA_CHARS] + " …(cut; see the ## output section)"
    return f"\nThe output schema:\n{rendered}"


def verify_final(result: JsonValue, contract: Contract) -> Verified | Rejected:
    """Check a final result (text, or an already-structured value from a JSON action)."""
    if contract.format == "text":
        text = result if isinstance(result, str) else json.dumps(result, ensure_ascii=False)
        return Verified(text)
    readings = json_readings(result)
    if not readings:
        return Rejected(
            "Your final answer must be a JSON value matching the output schema, but it did not "
            f"parse as JSON.{schema_reminder(contract)}\nReply with the JSON result only."
        )
    if contract.schema is None:
        return Verified(_preferred(readings))
    schema: Mapping[str, JsonValue] = contract.schema
    for value in readings:
        if not result_errors(value, schema):
            return Verified(value)
    candidate = _preferred(readings)
    listing = "\n".join(f"- {line}" for line in result_errors(candidate, schema))
    return Rejected(
        "Your final result does not satisfy the output schema:\n"
        f"{listing}{schema_reminder(contract)}\n"
        "Verify against the environment, fix the result, and answer again with the JSON value only.",
        candidate=candidate,
    )
