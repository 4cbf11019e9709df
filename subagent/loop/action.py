"""The JSON-action fallback parser (RFC 0007 §3.3) for endpoints without native tool calling.

`extract_json_object` finds the first balanced, parseable `{...}` in prose (string- and
escape-aware); `parse_action` turns it into a tool call, a final answer or a refusal. A parse
failure is a value, which the machine turns into a step-consuming observation.
"""

from __future__ import annotations

import json
from dataclasses import dataclass

from pydantic import JsonValue

from subagent.messages import JsonObject

MAX_SCAN = 1_000_000

ACTION_FORMAT = (
    "Reply with exactly one JSON object and nothing else:\n"
    '  {"action": "tool", "tool": "<tool name>", "arguments": {...}}   to call one tool;\n'
    '  {"action": "final", "result": <your answer>}                     when the task is done;\n'
    '  {"action": "refuse", "reason": "<why>"}                          if the task cannot be done.'
)


@dataclass(frozen=True, slots=True)
class ToolAction:
    tool: str
    arguments: JsonObject


@dataclass(frozen=True, slots=True)
class FinalAction:
    result: JsonValue


@dataclass(frozen=True, slots=True)
class RefuseAction:
    reason: str


@dataclass(frozen=True, slots=True)
class ParseFailure:
    reason: str


ParsedAction = ToolAction | FinalAction | RefuseAction | ParseFailure


def extract_json_object(text: str) -> JsonObject | None:
    """Return the first balanced `{...}` in `text` that parses as a JSON object, else None."""
    text = text[:MAX_SCAN]
    start = text.find("{")
    while start != -1:
        end = _balanced_end(text, start)
        if end is None:
            return None
        try:
            value = json.loads(text[start : end + 1])
        except ValueError:
            value = None
        if isinstance(value, dict):
            return value
        start = text.find("{", start + 1)
    return None


def _balanced_end(text: str, start: int) -> int | None:
    depth = 0
    in_string = False
    escaped = False
    for i in range(start, len(text)):
        ch = text[i]
        if in_string:
            if escaped:
                escaped = False
            elif ch == "\\":
                escaped = True
            elif ch == '"':
                in_string = False
        elif ch == '"':
            in_string = True
        elif ch == "{":
            depth += 1
        elif ch == "}":
            depth -= 1
            if depth == 0:
                return i
    return None


def parse_action(text: str) -> ParsedAction:
    """Parse a model's text reply as one action object."""
    obj = extract_json_object(text)
    if obj is None:
        return ParseFailure("no JSON object found")
    action = obj.get("action")
    if action == "tool":
        tool = obj.get("tool", obj.get("name"))
        arguments = obj.get("arguments", obj.get("args", {}))
        if not isinstance(tool, str) or not tool:
            return ParseFailure('a "tool" action needs a "tool" name')
        if not isinstance(arguments, dict):
            return ParseFailure('"arguments" must be a JSON object')
        return ToolAction(tool, arguments)
    if action == "final":
        if obj.get("refused") is True:
            return RefuseAction(str(obj.get("reason", obj.get("result", ""))))
        if "result" not in obj:
            return ParseFailure('a "final" action needs a "result"')
        return FinalAction(obj["result"])
    if action == "refuse":
        return RefuseAction(str(obj.get("reason", "")))
    return ParseFailure('"action" must be "tool", "final" or "refuse"')
