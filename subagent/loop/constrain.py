"""What a reply's text is constrained to, as JSON Schema (pure): constrained decoding.

In JSON-action mode every turn's reply must be one action, so the action union goes out as the
request's response schema: one object per offered tool — `{"action": "tool", "tool": <its name>,
"arguments": <its input schema>}` —, a `final` action whose `result` is the task's output
schema, and a `refuse` action with a non-empty reason. A request without tools (the wrap-up)
allows only `final` and `refuse`, or in native mode the bare output schema. Native requests with
tools carry none: a server that constrains the reply to a schema stops parsing tool calls.

A tool's `$defs` move to the root under a prefixed name and its `#/$defs/…` references follow
them, since servers resolve references against the whole document; a tool whose schema refers
anywhere else (`#`, `#/properties/…`) is constrained to any object only.
"""

from __future__ import annotations

from collections.abc import Mapping

from pydantic import JsonValue

from subagent.loop.state import Contract
from subagent.messages import JsonObject, ResponseSchema, ToolSpec

ACTION_SCHEMA_NAME = "agentd_action"
OUTPUT_SCHEMA_NAME = "agentd_result"
_DEF_KEYS = ("$defs", "definitions")
# Keywords OpenAI's strict mode does not take (its subset of JSON Schema).
_NOT_STRICT = frozenset(
    {
        "allOf",
        "oneOf",
        "not",
        "if",
        "then",
        "else",
        "dependentRequired",
        "dependentSchemas",
        "patternProperties",
    }
)


def action_schema(
    tools: tuple[ToolSpec, ...], contract: Contract, *, tools_allowed: bool = True
) -> ResponseSchema:
    """The JSON-action union for a turn offering `tools` (none when `tools_allowed` is false)."""
    defs: JsonObject = {}
    alternatives: list[JsonValue] = []
    if tools_allowed:
        for index, tool in enumerate(tools):
            arguments = _rooted(tool.input_schema, f"t{index}_", defs)
            alternatives.append(
                _action("tool", {"tool": {"type": "string", "enum": [tool.name]}, "arguments": arguments})
            )
    result = _result_schema(contract, defs)
    alternatives.append(_action("final", {"result": result}))
    alternatives.append(_action("refuse", {"reason": {"type": "string", "minLength": 1}}))
    schema: JsonObject = {"type": "object", "anyOf": alternatives}
    if defs:
        schema["$defs"] = defs
    return ResponseSchema(ACTION_SCHEMA_NAME, schema, strict=False)


def output_schema(contract: Contract) -> ResponseSchema | None:
    """The final answer's schema in a native request without tools: a JSON contract's schema.
    None for a text contract (free text) and for a JSON contract without a schema (any JSON
    value: nothing a schema would add)."""
    if contract.format != "json" or not contract.schema:
        return None
    schema: JsonObject = dict(contract.schema)
    return ResponseSchema(OUTPUT_SCHEMA_NAME, schema, strict=is_strict_compatible(schema))


def is_strict_compatible(schema: JsonValue) -> bool:
    """Whether `schema` is inside OpenAI strict mode's subset: every object lists all of its
    properties as required and forbids others, and no unsupported keyword appears."""
    if isinstance(schema, list):
        return all(is_strict_compatible(item) for item in schema)
    if not isinstance(schema, dict):
        return True
    if _NOT_STRICT & schema.keys():
        return False
    properties = schema.get("properties")
    if schema.get("type") == "object" or isinstance(properties, dict):
        if not isinstance(properties, dict) or schema.get("additionalProperties") is not False:
            return False
        required = schema.get("required")
        if not isinstance(required, list) or set(required) != set(properties):
            return False
    return all(is_strict_compatible(value) for key, value in schema.items() if isinstance(value, dict | list))


def _action(name: str, fields: JsonObject) -> JsonValue:
    properties: JsonObject = {"action": {"type": "string", "enum": [name]}, **fields}
    return {
        "type": "object",
        "properties": properties,
        "required": list(properties),
        "additionalProperties": False,
    }


def _result_schema(contract: Contract, defs: JsonObject) -> JsonValue:
    if contract.format == "json":
        if contract.schema is None:
            return {}
        return _rooted(contract.schema, "out_", defs)
    return {"type": "string", "minLength": 1}


def _rooted(schema: Mapping[str, JsonValue], prefix: str, defs: JsonObject) -> JsonValue:
    """`schema` to embed below the root: its definitions moved into `defs` under `prefix`."""
    own: dict[str, JsonValue] = {}
    for key in _DEF_KEYS:
        value = schema.get(key)
        if isinstance(value, dict):
            own.update({f"{key}/{name}": item for name, item in value.items()})
    renamed = {path: f"#/$defs/{prefix}{path.split('/', 1)[1]}" for path in own}
    if not _refs_resolvable(schema, renamed):
        return {"type": "object"}
    for path, item in own.items():
        defs[f"{prefix}{path.split('/', 1)[1]}"] = _renamed(item, renamed)
    body = {key: value for key, value in schema.items() if key not in _DEF_KEYS and key != "$schema"}
    return _renamed(body, renamed)


def _refs_resolvable(value: JsonValue | Mapping[str, JsonValue], renamed: Mapping[str, str]) -> bool:
    if isinstance(value, list):
        return all(_refs_resolvable(item, renamed) for item in value)
    if not isinstance(value, Mapping):
        return True
    ref = value.get("$ref")
    if ref is not None and (not isinstance(ref, str) or ref.removeprefix("#/") not in renamed):
        return False
    return all(_refs_resolvable(item, renamed) for item in value.values())


def _renamed(value: JsonValue, renamed: Mapping[str, str]) -> JsonValue:
    if isinstance(value, list):
        return [_renamed(item, renamed) for item in value]
    if not isinstance(value, dict):
        return value
    out: JsonObject = {}
    for key, item in value.items():
        if key == "$ref" and isinstance(item, str):
            out[key] = renamed[item.removeprefix("#/")]
        else:
            out[key] = _renamed(item, renamed)
    return out
