"""The `## tools` section of a JSON-action system prompt (pure).

A model without native tool calling learns the tools, the action format and how a turn goes only
from this text, and a small one follows what it is shown better than what it is told: each tool
is one line with its arguments laid out as the object it must send, the action format follows,
then where facts come from, then a short worked exchange on a made-up tool (docs/loop.md
"Native tools and JSON actions").
"""

from __future__ import annotations

import json

from pydantic import JsonValue

from subagent.loop.action import ACTION_FORMAT, GROUNDING
from subagent.messages import ToolSpec

# Scalar JSON Schema types a one-line signature can show as they are.
_SCALARS = frozenset({"string", "number", "integer", "boolean", "null"})

EXAMPLE = (
    "Example (a different task; its tool is made up and not offered to you). "
    'Task: "How many bytes is the file a.log?"\n'
    '  you: {"action": "tool", "tool": "files__stat", "arguments": {"path": "a.log"}}\n'
    '  tool result: {"size": 5120, "mode": "0644"}\n'
    '  you: {"action": "final", "result": "5120"}\n'
    "A task whose answer needs no outside facts (a calculation, data given in the task) is "
    'answered at once with a "final" action.'
)


def json_tools_section(tools: tuple[ToolSpec, ...]) -> str:
    """The tools, the action format, the grounding rule and the worked example."""
    lines = ["## tools"]
    if tools:
        lines.append('Tools you can call (an argument marked "?" may be left out):')
        lines.extend(f"- {tool_line(t)}" for t in tools)
    else:
        lines.append("No tools are offered for this task.")
    return "\n".join([*lines, "", ACTION_FORMAT, "", GROUNDING, "", EXAMPLE])


def tool_line(tool: ToolSpec) -> str:
    """`name {"arg": type, "opt"?: type}: description` — or the whole schema when it is not flat."""
    description = f": {tool.description}" if tool.description else ""
    return f"{tool.name} {arguments_shape(tool.input_schema)}{description}"


def arguments_shape(schema: dict[str, JsonValue]) -> str:
    """An object schema of simply typed properties as one line; any other schema as compact JSON."""
    properties = schema.get("properties")
    required = schema.get("required")
    required_names = set(required) if isinstance(required, list) else set()
    if schema.get("type", "object") != "object" or not isinstance(properties, dict):
        return _compact(schema) if properties is not None or set(schema) - {"type"} else "{}"
    shown: list[str] = []
    for name, prop in properties.items():
        kind = _simple_type(prop)
        if kind is None:
            return _compact(schema)
        mark = "" if name in required_names else "?"
        shown.append(f"{json.dumps(name)}{mark}: {kind}")
    return "{" + ", ".join(shown) + "}"


def _simple_type(prop: JsonValue) -> str | None:
    """`string`, `"a"|"b"`, `array of string` … for a property a line can show, else None."""
    if not isinstance(prop, dict):
        return None
    enum = prop.get("enum")
    if isinstance(enum, list) and enum:
        return "|".join(json.dumps(v) for v in enum)
    kind = prop.get("type")
    if isinstance(kind, str) and kind in _SCALARS:
        return kind
    if kind == "array":
        item = _simple_type(prop.get("items", {})) if "items" in prop else "any"
        return f"array of {item}" if item is not None else None
    if kind == "object" and set(prop) <= {"type", "description"}:
        return "object"
    return None


def _compact(schema: dict[str, JsonValue]) -> str:
    return json.dumps(schema, sort_keys=True, separators=(",", ":"))
