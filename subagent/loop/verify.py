"""The VERIFY gate (RFC 0007 §3.5): machine-checkable contract criteria only, never self-judgment.

A final answer passes when it is not vacuous (re-asked once, then accepted) and, for a JSON
contract, parses as JSON and validates against the schema (`protocol.contract`, the check the
supervisor also applies to a child's result). A failure is an observation that names what is
missing; the loop continues and the failed turn has consumed a step.
"""

from __future__ import annotations

import json
from dataclasses import dataclass

from pydantic import JsonValue

from protocol.contract import result_errors
from subagent.loop.action import extract_json_object
from subagent.loop.state import Contract

_PUNCTUATION_ONLY = set(".,;:!?-_*'\"`()[]{}… \t\r\n")


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


def parse_json_result(text: str) -> tuple[bool, JsonValue]:
    """Parse a final answer as JSON: the whole text (code fences stripped), else the first object."""
    stripped = text.strip()
    if stripped.startswith("```"):
        stripped = stripped.strip("`")
        first_newline = stripped.find("\n")
        stripped = stripped[first_newline + 1 :] if first_newline != -1 else stripped
    try:
        value: JsonValue = json.loads(stripped)
        return True, value
    except ValueError:
        pass
    obj = extract_json_object(text)
    if obj is None:
        return False, None
    return True, obj


def verify_final(result: JsonValue, contract: Contract) -> Verified | Rejected:
    """Check a final result (text, or an already-structured value from a JSON action)."""
    if contract.format == "text":
        text = result if isinstance(result, str) else json.dumps(result, ensure_ascii=False)
        return Verified(text)
    if isinstance(result, str):
        ok, value = parse_json_result(result)
        if not ok:
            return Rejected(
                "Your final answer must be a JSON value matching the output schema, but it did not "
                "parse as JSON. Reply with the JSON result only."
            )
    else:
        value = result
    if contract.schema is None:
        return Verified(value)
    errors = result_errors(value, contract.schema)
    if not errors:
        return Verified(value)
    listing = "\n".join(f"- {line}" for line in errors)
    return Rejected(
        "Your final result does not satisfy the output schema:\n"
        f"{listing}\nVerify against the environment, fix the result, and answer again.",
        candidate=value,
    )
