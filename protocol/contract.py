"""The output contract's machine check (RFC 0007 §3.5): is a schema valid, does a result satisfy it.

One implementation for both processes: admission checks a submitted schema, the child's VERIFY
gate checks its final answer, and the supervisor checks a child's result before a parent reads its
distillate. Validation is `jsonschema`'s, imported inside the functions: the one dependency of
`protocol` beyond pydantic and the standard library (docs/decisions.md).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING

from pydantic import JsonValue

if TYPE_CHECKING:
    from jsonschema.protocols import Validator

MAX_REPORTED_ERRORS = 5
MAX_ERROR_CHARS = 300


def _validator(schema: Mapping[str, JsonValue]) -> Validator | str:
    """A validator for `schema`, or why `schema` is not a valid JSON Schema.

    The one place a validator is built: the draft the schema's `$schema` names, else the latest.
    How `$ref` is resolved is decided here too.
    """
    from jsonschema.exceptions import SchemaError
    from jsonschema.validators import validator_for

    as_dict = dict(schema)
    validator_cls = validator_for(as_dict)
    try:
        validator_cls.check_schema(as_dict)
    except SchemaError as exc:
        return exc.message
    return validator_cls(as_dict)


def schema_error(schema: Mapping[str, JsonValue]) -> str | None:
    """Why `schema` is not a valid JSON Schema, or None when it is."""
    validator = _validator(schema)
    return validator if isinstance(validator, str) else None


def result_errors(value: JsonValue, schema: Mapping[str, JsonValue]) -> list[str]:
    """How `value` fails `schema`, as 'path: message' lines, the first few by path (empty = valid).

    An invalid schema is reported as the one line, never raised: a nested child's schema was
    written by its parent's model and nothing checked it before the child ran.
    """
    validator = _validator(schema)
    if isinstance(validator, str):
        return [f"the output schema itself is invalid: {validator}"]
    errors = sorted(validator.iter_errors(value), key=lambda e: list(e.absolute_path))
    lines = []
    for err in errors[:MAX_REPORTED_ERRORS]:
        where = "/".join(str(p) for p in err.absolute_path) or "<root>"
        lines.append(f"{where}: {err.message[:MAX_ERROR_CHARS]}")
    if len(errors) > MAX_REPORTED_ERRORS:
        lines.append(f"... and {len(errors) - MAX_REPORTED_ERRORS} more")
    return lines
