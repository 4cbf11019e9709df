"""The output contract's machine check (docs/loop.md, "VERIFY"): is a schema valid, does a result satisfy it.

One implementation for both processes: admission checks a submitted schema, the child's VERIFY
gate checks its final answer, and a parent subagent checks a schema its model wrote before asking
for the child and the child's result when it reads the distillate. The supervisor never validates
against a schema a model wrote (a backtracking `pattern` would stall its event loop): at the spawn
chokepoint it applies only `reference_problem`, a walk that evaluates nothing. Validation is
`jsonschema`'s, imported inside the functions: the one dependency of `protocol` beyond pydantic
and the standard library (docs/decisions.md).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Annotated, Any, Literal, NoReturn

from pydantic import BaseModel, ConfigDict, Field, JsonValue

if TYPE_CHECKING:
    from jsonschema.protocols import Validator

MAX_REPORTED_ERRORS = 5
MAX_ERROR_CHARS = 300


REF_KEYWORDS = ("$ref", "$dynamicRef", "$recursiveRef")


class OutputContract(BaseModel):
    """What the result must look like. `format="json"` with a `schema` is machine-checked (VERIFY)."""

    objective: str | None = Field(default=None, max_length=4000)
    format: Literal["text", "json"] = "text"
    schema_: dict[str, JsonValue] | None = Field(default=None, alias="schema")
    success_criteria: list[Annotated[str, Field(max_length=1000)]] = Field(
        default_factory=list, max_length=32
    )

    model_config = ConfigDict(extra="forbid", frozen=True, populate_by_name=True, serialize_by_alias=True)


def remote_ref(schema: Mapping[str, JsonValue]) -> str | None:
    """Where `schema` refers outside itself, as a dotted path (`properties.a.$ref`), or None.

    A client's schema may only refer inside itself (`#…`): anything else names a URL or a file
    that validation would have to fetch or read as the daemon's user (docs/design.md §14).
    """
    pending: list[tuple[tuple[str, ...], JsonValue]] = [((), dict(schema))]
    while pending:
        path, node = pending.pop()
        if isinstance(node, dict):
            for key, value in node.items():
                if key in REF_KEYWORDS and isinstance(value, str) and not value.startswith("#"):
                    return ".".join((*path, key))
                pending.append(((*path, key), value))
        elif isinstance(node, list):
            pending.extend(((*path, str(i)), item) for i, item in enumerate(node))
    return None


def _validator(schema: Mapping[str, JsonValue]) -> Validator | str:
    """A validator for `schema`, or why `schema` is not a valid JSON Schema.

    The one place a validator is built: the draft the schema's `$schema` names, else the latest.
    References resolve inside the schema only: its registry never retrieves anything, so a `$ref`
    to a URL or a file (refused at submit, see `remote_ref`) can never make anything fetch or read.
    """
    from jsonschema.exceptions import SchemaError
    from jsonschema.validators import validator_for
    from referencing import Registry

    as_dict = dict(schema)
    if not isinstance(as_dict.get("$schema", ""), str):
        return "$schema must be a string (the URI of a JSON Schema draft)"
    where = remote_ref(as_dict)
    if where is not None:
        return f"{where}: {REMOTE_REF}"
    validator_cls = validator_for(as_dict)
    try:
        validator_cls.check_schema(as_dict)
    except SchemaError as exc:
        return exc.message
    # mypy's attrs plugin does not see `referencing`'s field aliases (`retrieve`, `ref`).
    registry: Registry[bool | Mapping[str, Any]] = Registry(retrieve=_never_retrieve)  # type: ignore[call-arg]
    return validator_cls(as_dict, registry=registry)


REMOTE_REF = "only references inside the schema (starting with '#') are allowed, never a URL or a file"


def _never_retrieve(uri: str) -> NoReturn:
    from referencing.exceptions import NoSuchResource

    raise NoSuchResource(ref=uri)  # type: ignore[call-arg]


def schema_error(schema: Mapping[str, JsonValue]) -> str | None:
    """Why `schema` is not a valid JSON Schema, or None when it is."""
    validator = _validator(schema)
    return validator if isinstance(validator, str) else None


def reference_problem(contract: OutputContract) -> str | None:
    """A reference outside the contract's schema, naming the field, or None.

    One pass over the schema's JSON that compiles and matches nothing, so its cost is linear in
    the (frame-capped) schema's size: the supervisor's check of a schema a model wrote.
    """
    schema = contract.schema_
    if schema is None:
        return None
    where = remote_ref(schema)
    if where is not None:
        return f"output_contract.schema.{where}: {REMOTE_REF}"
    return None


def contract_problem(contract: OutputContract) -> str | None:
    """Why an output contract cannot be accepted, naming the field (`output_contract.schema…`):
    used at submit, and by a parent subagent for a schema its model wrote."""
    schema = contract.schema_
    if schema is None:
        return None
    problem = reference_problem(contract)
    if problem is not None:
        return problem
    problem = schema_error(schema)
    if problem is not None:
        return f"output_contract.schema is not a valid JSON Schema: {problem}"
    return None


def result_errors(value: JsonValue, schema: Mapping[str, JsonValue]) -> list[str]:
    """How `value` fails `schema`, as 'path: message' lines, the first few by path (empty = valid).

    An invalid schema is reported as the one line, never raised: a nested child's schema was
    written by its parent's model and nothing checked it before the child ran.
    """
    validator = _validator(schema)
    if isinstance(validator, str):
        return [f"the output schema itself is invalid: {validator}"]
    from referencing.exceptions import Unresolvable

    try:
        errors = sorted(validator.iter_errors(value), key=lambda e: list(e.absolute_path))
    except Unresolvable as exc:
        # Never fetched or read: the one answer for every unresolvable reference, so a failure
        # says nothing about what exists outside the schema.
        return [f"the output schema has a reference that does not resolve inside it: {exc.ref[:200]}"]
    lines = []
    for err in errors[:MAX_REPORTED_ERRORS]:
        where = "/".join(str(p) for p in err.absolute_path) or "<root>"
        lines.append(f"{where}: {err.message[:MAX_ERROR_CHARS]}")
    if len(errors) > MAX_REPORTED_ERRORS:
        lines.append(f"... and {len(errors) - MAX_REPORTED_ERRORS} more")
    return lines
