"""`check_spec`: at submit, a spec the configuration cannot run is refused in the client's terms."""

from __future__ import annotations

import pytest
from pydantic import JsonValue

from agentd.admission import SpecRejected, check_spec
from protocol.api import TaskSpec
from protocol.spawn import OutputContract
from tests.config.conftest import MINIMAL, Load


def _spec(schema: dict[str, JsonValue]) -> TaskSpec:
    return TaskSpec(instruction="x", output_contract=OutputContract(format="json", schema_=schema))


def test_a_spec_with_a_valid_output_schema_is_admitted(load: Load) -> None:
    check_spec(load(MINIMAL), _spec({"type": "object", "required": ["n"]}))


def test_a_spec_whose_output_schema_is_not_a_json_schema_is_refused_naming_why(load: Load) -> None:
    with pytest.raises(SpecRejected) as refused:
        check_spec(load(MINIMAL), _spec({"type": "no-such-type"}))
    assert str(refused.value).startswith("output_contract.schema is not a valid JSON Schema: ")
    assert "'no-such-type' is not valid" in str(refused.value)
