"""The plain path's description of the wire (`agentd.cli.plain_commands`, `task_facts`) is held
equal to the models' (`protocol/api.py`): every request it sends validates as the request the
model path would send, with the same values; every task the daemon sends decodes to the fields
the models read and prints the same text; `--json` prints the model's own `model_dump_json()`;
and no flag value the models refuse is sent by the plain path."""

from __future__ import annotations

import argparse
import json
from collections.abc import Callable
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from agentd.api.client import _result_text
from agentd.api.frames import result_frame
from agentd.cli.flags import spec_from_args
from agentd.cli.main import build_parser
from agentd.cli.outcome import outcome_line
from agentd.cli.plain_commands import (
    SCHEDULE_FLAGS,
    json_items,
    list_params,
    plain_runner,
    submit_params,
)
from agentd.cli.task_facts import ShapeError, TaskFacts, task_facts
from agentd.cli.task_ids import normalised
from agentd.cli.task_text import cancel_line, describe, list_lines, result_text, status_lines
from agentd.errors import UsageError
from protocol.api import (
    REQUEST_ADAPTER,
    GetRequest,
    ListParams,
    ListRequest,
    MatchRequest,
    SubmitParams,
    SubmitRequest,
    TaskRef,
    TaskView,
)
from tests.protocol.api_strategies import submit_results, task_views
from tests.protocol.strategies import json_values, names

NOW = 1_800_000_000.0
TASK_FIELDS = (
    *("task_id", "state", "status", "exit_code", "result", "partial", "abort", "instruction"),
    *("model", "mcp", "created_at", "started_at", "ended_at", "pid", "schedule_id", "trigger"),
    *("uri", "executor", "worker", "resumes"),
)


def _decoded(view: TaskView) -> TaskFacts:
    """The task as the plain path reads it off the wire."""
    return task_facts(json.loads(view.model_dump_json()))


def _same(render: Callable[[Any], object], view: TaskView, facts: TaskFacts) -> None:
    """`render` gives the same for both, or fails the same way (a time out of datetime's range)."""
    try:
        expected: object = render(view)
    except (ValueError, OverflowError, OSError) as exc:
        with pytest.raises(type(exc)):
            render(facts)
        return
    assert render(facts) == expected


def _wire(request: dict[str, Any]) -> Any:
    return REQUEST_ADAPTER.validate_python({"jsonrpc": "2.0", "id": 1, **request})


# ---- what the daemon sends ---------------------------------------------------------------------


@given(task_views)
def test_a_task_decodes_to_the_fields_the_models_read(view: TaskView) -> None:
    facts = _decoded(view)
    for name in TASK_FIELDS:
        assert getattr(facts, name) == getattr(view, name), name
    for name in ("tokens_in", "tokens_out", "steps", "cost_usd", "tokens"):
        assert getattr(facts.usage, name) == getattr(view.usage, name), name
    assert (facts.error is None) == (view.error is None)
    if view.error is not None and facts.error is not None:
        assert (facts.error.kind, facts.error.message) == (view.error.kind, view.error.message)
    assert (facts.forked_from is None) == (view.forked_from is None)
    assert (facts.throttled is None) == (view.throttled is None)


@given(task_views, st.booleans())
def test_a_decoded_task_prints_what_the_model_prints(view: TaskView, terminal: bool) -> None:
    facts = _decoded(view)
    _same(lambda v: status_lines(v, now=NOW), view, facts)
    _same(lambda v: result_text(v, terminal=terminal), view, facts)
    _same(lambda v: list_lines([v], now=NOW, width=80), view, facts)
    _same(describe, view, facts)
    _same(cancel_line, view, facts)
    _same(lambda v: outcome_line("submit", v), view, facts)


@given(st.lists(task_views, max_size=4), st.integers(0, 2**31))
def test_json_prints_each_task_as_its_model_dumps_it(views: list[TaskView], request_id: int) -> None:
    """The daemon's own bytes, cut out of its frame: floats are spelled as pydantic spells them
    (`0.00001`, where `json.dumps` would write `1e-05`)."""
    frame = result_frame(request_id, ListRequest(params=ListParams()).dump_result(views))
    text = _result_text(frame.rstrip(b"\n"), request_id)
    assert text is not None
    assert json_items(text) == [view.model_dump_json() for view in views]
    one = (
        result_frame(request_id, GetRequest(params=TaskRef(task_id="t")).dump_result(views[0]))
        if views
        else None
    )
    if one is not None:
        assert _result_text(one.rstrip(b"\n"), request_id) == views[0].model_dump_json()


@given(submit_results, st.integers(0, 2**31))
def test_submit_json_prints_the_result_as_its_model_dumps_it(result: Any, request_id: int) -> None:
    frame = result_frame(request_id, SubmitRequest.result_adapter.dump_json(result))
    assert _result_text(frame.rstrip(b"\n"), request_id) == result.model_dump_json()


@given(json_values | st.dictionaries(st.sampled_from(TASK_FIELDS), json_values))
def test_a_task_of_the_wrong_shape_is_a_shape_error_never_a_crash(value: object) -> None:
    try:
        task_facts(value)
    except ShapeError:
        pass


# ---- what the plain path sends ----------------------------------------------------------------

SUBMIT = build_parser()


def _mostly(valid: st.SearchStrategy[Any], odd: st.SearchStrategy[Any]) -> st.SearchStrategy[Any]:
    """Values the models take five times in six (so the plain path is taken often), else odd ones."""
    return st.sampled_from([valid, valid, valid, valid, valid, odd]).flatmap(lambda chosen: chosen)


flag_names = _mostly(names, st.text(max_size=70) | st.sampled_from(["", "x\n", "é", "\udcff", "a" * 65]))
flag_ints = _mostly(st.none() | st.integers(1, 100_000), st.integers(-2, 200_000) | st.just(2**40))
flag_costs = _mostly(st.none() | st.floats(1e-9, 1e6), st.floats() | st.sampled_from([0.0, 1e-7, 2e6]))
flag_deadlines = _mostly(
    st.sampled_from([None, "30s", "5m", "7d", "2h"]), st.sampled_from(["0s", "8d", "soon"])
)


@st.composite
def submit_flags(draw: st.DrawFn) -> argparse.Namespace:
    """`agentd submit`'s namespace with values a person might type, many of them refused."""
    args = SUBMIT.parse_args(["submit", "x"])
    args.instruction = draw(st.text(min_size=1, max_size=40) | st.sampled_from(["", "\udcff"]))
    args.model = draw(st.none() | flag_names)
    args.mcp = draw(st.lists(names, max_size=3) | st.lists(flag_names, max_size=3) | st.just(["s"] * 65))
    args.approve = draw(
        st.lists(st.text(min_size=1, max_size=20), max_size=3) | st.lists(st.text(max_size=210))
    )
    args.max_steps, args.max_tokens = draw(flag_ints), draw(flag_ints)
    args.max_cost, args.deadline = draw(flag_costs), draw(flag_deadlines)
    args.idempotency_key = draw(
        _mostly(st.none() | st.text(max_size=20), st.text(min_size=120, max_size=130))
    )
    args.on_budget = draw(st.sampled_from([None, "end", "pause"]))
    return args


@given(submit_flags())
def test_a_plain_submit_sends_what_the_model_path_sends_and_nothing_the_models_refuse(
    args: argparse.Namespace,
) -> None:
    params = submit_params(args)
    if params is None:
        return
    spec = spec_from_args(args, model=args.model, mcp=list(args.mcp))  # raises if the models refuse
    expected = SubmitRequest(
        id=1, params=SubmitParams(spec=spec, idempotency_key=args.idempotency_key or None)
    )
    assert _wire({"method": "task.submit", "params": params}) == expected


def test_a_plain_submit_is_taken_for_the_flags_a_person_usually_types() -> None:
    argv = ["submit", "go", "--model", "m", "--mcp", "fs", "--max-steps", "5", "--deadline", "2m", "--json"]
    args = SUBMIT.parse_args(argv)
    assert submit_params(args) is not None
    assert plain_runner("submit", args) is not None


@pytest.mark.parametrize(
    "extra",
    [
        pytest.param(["--wait"], id="wait"),
        pytest.param(["--follow"], id="follow"),
        pytest.param(["--every", "1h"], id="schedule"),
        pytest.param(["--output-schema", "s.json"], id="output-schema"),
        pytest.param(["--max-steps", "0"], id="refused-value"),
        pytest.param(["--deadline", "soon"], id="not-a-duration"),
        pytest.param(["--mcp", "a b"], id="not-a-name"),
    ],
)
def test_a_submit_the_plain_checks_cannot_vouch_for_takes_the_model_path(extra: list[str]) -> None:
    assert plain_runner("submit", SUBMIT.parse_args(["submit", "go", *extra])) is None


def test_the_plain_path_knows_every_schedule_flag() -> None:
    from agentd.cli.flags import SCHEDULE_FLAGS as MODEL_SCHEDULE_FLAGS

    assert SCHEDULE_FLAGS == MODEL_SCHEDULE_FLAGS


@given(
    st.sampled_from([None, "queued", "running", "terminal"]),
    st.integers(-5, 1100),
    st.none() | st.text(max_size=70),
    st.none() | st.text(max_size=70),
)
def test_a_plain_list_sends_what_the_models_take(
    state: str | None, limit: int, before: str | None, schedule: str | None
) -> None:
    args = argparse.Namespace(state=state, limit=limit, before=before, schedule=schedule)
    params = list_params(args)
    if params is None:
        return
    sent = {**params, "before": normalised(before) if before is not None else None}
    expected = ListRequest(
        id=1, params=ListParams(state=state, limit=limit, before=sent["before"], schedule_id=schedule)
    )
    assert _wire({"method": "task.list", "params": sent}) == expected


@given(st.text(max_size=70))
def test_a_plain_status_sends_only_a_task_id_the_models_take(task: str) -> None:
    args = argparse.Namespace(task=task)
    if plain_runner("status", args) is None:
        return
    assert _wire({"method": "task.get", "params": {"task_id": normalised(task)}}) == GetRequest(
        id=1, params=TaskRef(task_id=normalised(task))
    )


def test_a_short_id_is_matched_with_a_request_the_models_take() -> None:
    request = _wire({"method": "task.match", "params": {"prefix": "t_01JB", "limit": 4}})
    assert isinstance(request, MatchRequest)
    assert (request.params.prefix, request.params.limit) == ("t_01JB", 4)


def test_a_value_the_models_refuse_is_still_worded_by_them() -> None:
    args = SUBMIT.parse_args(["submit", "go", "--max-steps", "0"])
    with pytest.raises(UsageError, match="--max-steps"):
        spec_from_args(args, model=None, mcp=[])
