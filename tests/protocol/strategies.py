"""Hypothesis strategies for the wire models of `protocol/`.

Each strategy builds only valid instances (field constraints and cross-field validators kept), so
a property can assume the value is a legal message. JSON values never contain NaN or infinity.
"""

from __future__ import annotations

from typing import get_args

from hypothesis import strategies as st
from pydantic import JsonValue, SecretStr

from protocol.control import (
    Batch,
    Cancel,
    CancelParams,
    Event,
    EventParams,
    HandleParams,
    Inject,
    InjectParams,
    NotesParams,
    Ping,
    PingParams,
    Ready,
    ReadyParams,
    RequestedLimits,
    Result,
    Spawn,
    SpawnRequestParams,
    SupCancel,
    SupSpawn,
    SupStatus,
    SupWait,
    Turn,
    TurnParams,
    Usage,
    UsageParams,
)
from protocol.events import EventName
from protocol.jsonrpc import ErrorData, ErrorResponse, Response
from protocol.result import RunError, RunResult, RunUsage, TerminalStatus
from protocol.spawn import (
    EndpointSpec,
    Limits,
    LoopKnobs,
    McpServerSpec,
    OutputContract,
    SeedMessage,
    SpawnPayload,
    Telemetry,
)
from protocol.zygote import MAX_ERROR_CHARS, Fork, Forked, ForkFailed, StartFailed
from protocol.zygote import Ready as ZygoteReady

SECRET_PREFIX = "sk-test-"

short_text = st.text(max_size=24)
nonempty_text = st.text(min_size=1, max_size=24)
finite_floats = st.floats(allow_nan=False, allow_infinity=False)
positive_floats = st.floats(min_value=0.0, exclude_min=True, max_value=1e9, allow_nan=False)
non_negative = st.integers(min_value=0, max_value=2**53)

json_values: st.SearchStrategy[JsonValue] = st.recursive(
    st.none() | st.booleans() | st.integers() | finite_floats | short_text,
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(short_text, inner, max_size=4),
    max_leaves=12,
)
json_objects: st.SearchStrategy[dict[str, JsonValue]] = st.dictionaries(short_text, json_values, max_size=4)

names = st.from_regex(r"\A[A-Za-z0-9][A-Za-z0-9_.-]{0,15}\Z")
handles = st.from_regex(r"\A0(\.[0-9]{1,4}){0,4}\Z")
request_ids: st.SearchStrategy[int | str] = non_negative | st.text(max_size=64)

# A secret is recognisable (prefix) and long enough not to occur by accident in other fields.
secret_values = st.text(alphabet="0123456789abcdef", min_size=16, max_size=24).map(
    lambda s: SECRET_PREFIX + s
)
secrets = secret_values.map(SecretStr)


output_contracts = st.builds(
    OutputContract,
    objective=st.none() | short_text,
    format=st.sampled_from(["text", "json"]),
    schema_=st.none() | json_objects,
    success_criteria=st.lists(short_text, max_size=3),
)

seed_messages = st.builds(SeedMessage, role=st.sampled_from(["user", "assistant"]), content=short_text)


@st.composite
def endpoints(draw: st.DrawFn) -> EndpointSpec:
    kind = draw(st.sampled_from(["openai", "anthropic", "scripted"]))
    return EndpointSpec(
        name=draw(names),
        kind=kind,
        base_url=None if kind == "scripted" else "http://127.0.0.1:" + str(draw(st.integers(1, 65535))),
        model=draw(short_text),
        api_key=draw(st.none() | secrets),
        headers=draw(st.dictionaries(short_text, short_text, max_size=3)),
        script_path=draw(nonempty_text) if kind == "scripted" else None,
        stream=draw(st.booleans()),
        tool_mode=draw(st.sampled_from(["native", "json", "auto"])),
        context_window=draw(st.integers(min_value=1024, max_value=2**31)),
        max_output_tokens=draw(st.none() | st.integers(min_value=1, max_value=2**31)),
        request_timeout_s=draw(positive_floats),
        read_idle_timeout_s=draw(positive_floats),
        first_token_timeout_s=draw(positive_floats),
        stream_idle_timeout_s=draw(positive_floats),
    )


@st.composite
def mcp_servers(draw: st.DrawFn) -> McpServerSpec:
    transport = draw(st.sampled_from(["stdio", "http"]))
    return McpServerSpec(
        name=draw(names),
        transport=transport,
        command=draw(st.lists(short_text, min_size=1, max_size=3)) if transport == "stdio" else [],
        env=draw(st.dictionaries(names, secrets, max_size=3)),
        cwd=draw(st.none() | short_text),
        url="http://127.0.0.1/mcp" if transport == "http" else draw(st.none() | short_text),
        headers=draw(st.dictionaries(names, secrets, max_size=3)),
        required=draw(st.booleans()),
        tools=draw(st.none() | st.lists(short_text, max_size=3)),
        trust=draw(st.lists(short_text, max_size=3)),
        connect_timeout_s=draw(positive_floats),
        call_timeout_s=draw(positive_floats),
    )


limits = st.builds(
    Limits,
    max_steps=st.integers(1, 100_000),
    max_tokens=st.integers(min_value=1, max_value=2**40),
    deadline_s=positive_floats,
    remaining_depth=st.integers(0, 16),
)

loop_knobs = st.builds(
    LoopKnobs,
    repeat_cap=st.integers(1, 100),
    idle_limit=st.integers(1, 100),
    keep_verbatim=st.integers(0, 100),
    compaction_high_water=st.floats(min_value=0.0, max_value=1.0, exclude_min=True),
    transport_retries=st.integers(0, 10),
    backoff_initial_s=positive_floats,
    backoff_max_s=positive_floats,
    vacuous_reasks=st.integers(0, 10),
    catalogue_bytes=st.integers(0, 10**6),
)

telemetry = st.builds(
    Telemetry,
    log_level=st.sampled_from(["debug", "info", "warning", "error"]),
    capture_content=st.booleans(),
    traceparent=st.none() | short_text,
)

spawn_payloads = st.builds(
    SpawnPayload,
    task_id=nonempty_text,
    run_id=nonempty_text,
    handle=handles,
    depth=st.integers(0, 16),
    instruction=nonempty_text,
    output_contract=output_contracts,
    context_seed=st.lists(seed_messages, max_size=3),
    intelligence=st.lists(endpoints(), min_size=1, max_size=3),
    mcp_servers=st.lists(mcp_servers(), max_size=3, unique_by=lambda s: s.name),
    limits=limits,
    loop=loop_knobs,
    telemetry=telemetry,
    notes_path=st.none() | short_text,
    warm=st.booleans(),
)

run_results = st.builds(
    RunResult,
    status=st.sampled_from(TerminalStatus),
    result=json_values,
    partial=st.booleans(),
    usage=st.builds(
        RunUsage,
        tokens_in=non_negative,
        tokens_out=non_negative,
        steps=non_negative,
        model_calls=non_negative,
        tool_calls=non_negative,
    ),
    abort=st.sampled_from([None, "intelligence", "mcp"]),
    error=st.none() | st.builds(RunError, kind=short_text, message=short_text),
)

handle_params = st.builds(
    HandleParams, handle=handles, timeout_s=st.none() | st.floats(min_value=0.0, max_value=1e9)
)

responses = st.builds(Response, id=request_ids, result=json_values)
error_responses = st.builds(
    ErrorResponse,
    id=st.none() | request_ids,
    error=st.builds(ErrorData, code=st.integers(-(2**31), 2**31), message=short_text, data=json_values),
)

spawns = st.builds(Spawn, params=spawn_payloads)
pings = st.builds(Ping, id=request_ids, params=st.builds(PingParams, seq=non_negative))
cancels = st.builds(Cancel, params=st.builds(CancelParams, reason=short_text))
injects = st.builds(Inject, params=st.builds(InjectParams, message=short_text))

readies = st.builds(Ready, params=st.builds(ReadyParams, pid=st.integers(min_value=1, max_value=2**22)))
events = st.builds(
    Event,
    params=st.builds(EventParams, event=st.sampled_from(get_args(EventName)), fields=json_objects),
)
usages = st.builds(
    Usage,
    params=st.builds(
        UsageParams, tokens_in=non_negative, tokens_out=non_negative, steps=non_negative, model=short_text
    ),
)
batches = st.builds(
    Batch,
    params=st.builds(
        NotesParams,
        events=st.lists(events.map(lambda e: e.params), max_size=4),
        usage=st.lists(usages.map(lambda u: u.params), max_size=2),
    ),
)
turns = st.builds(Turn, params=st.builds(TurnParams, result=json_values))
results = st.builds(Result, params=run_results)
sup_spawns = st.builds(
    SupSpawn,
    id=request_ids,
    params=st.builds(
        SpawnRequestParams,
        instruction=nonempty_text,
        output_contract=output_contracts,
        context_seed=st.lists(seed_messages, max_size=3),
        tool_scope=st.none() | st.lists(short_text, max_size=3),
        limits=st.builds(
            RequestedLimits,
            max_steps=st.none() | st.integers(1, 1000),
            max_tokens=st.none() | st.integers(1, 10**6),
            deadline_s=st.none() | st.floats(0.1, 1000),
        ),
        wait=st.booleans(),
    ),
)
sup_waits = st.builds(SupWait, id=request_ids, params=handle_params)
sup_statuses = st.builds(SupStatus, id=request_ids, params=handle_params)
sup_cancels = st.builds(SupCancel, id=request_ids, params=handle_params)


# ---- the zygote's messages (protocol/zygote.py) ----------------------------------------------

zygote_ids = st.integers(min_value=1, max_value=2**53)
pids = st.integers(min_value=1, max_value=2**22)
zygote_errors = st.text(max_size=MAX_ERROR_CHARS)

forks = st.builds(Fork, id=zygote_ids, env=st.dictionaries(nonempty_text, short_text, max_size=8))
zygote_readies = st.builds(ZygoteReady, pid=pids)
start_failures = st.builds(StartFailed, error=zygote_errors)
forkeds = st.builds(Forked, id=zygote_ids, pid=pids)
fork_failures = st.builds(ForkFailed, id=st.none() | zygote_ids, error=zygote_errors)
