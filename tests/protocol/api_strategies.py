"""Hypothesis strategies for the daemon API's models (`protocol/api.py`): every method's request,
and every method's result.

Like `strategies.py`, each builds only valid instances (field constraints kept), so a property can
assume the value is a legal message.
"""

from __future__ import annotations

from typing import Any, get_args

from hypothesis import strategies as st

from protocol.api import (
    ApprovalDecideParams,
    ApprovalDecideRequest,
    ApprovalListParams,
    ApprovalListRequest,
    ApprovalView,
    BudgetLine,
    BudgetsRequest,
    BudgetsView,
    CancelParams,
    CancelRequest,
    DaemonStatus,
    DeferralView,
    DeferredTaskView,
    EventsParams,
    EventsRequest,
    EventView,
    ExtendParams,
    ExtendRequest,
    ForkOrigin,
    ForkParams,
    ForkRequest,
    GetRequest,
    ListParams,
    ListRequest,
    LoopOverrides,
    MatchParams,
    MatchRequest,
    NodeView,
    Request,
    RetryPolicy,
    ScheduleCreateParams,
    ScheduleCreateRequest,
    ScheduleCreateResult,
    ScheduleDeleteRequest,
    ScheduleGetRequest,
    ScheduleListParams,
    ScheduleListRequest,
    SchedulePauseRequest,
    ScheduleRef,
    ScheduleResumeRequest,
    ScheduleSpec,
    ScheduleView,
    SpecLimits,
    StatusRequest,
    SubmitParams,
    SubmitRequest,
    SubmitResult,
    TaskMatches,
    TaskRef,
    TaskSpec,
    TaskState,
    TaskView,
    ThrottleView,
    TranscriptParams,
    TranscriptRequest,
    TranscriptStep,
    TranscriptView,
    TreeRequest,
    TriggerListRequest,
    TriggerPauseRequest,
    TriggerRef,
    TriggerRestartRequest,
    TriggerResumeRequest,
    TriggerView,
    WaitParams,
    WaitRequest,
    WatchEnded,
    WatchParams,
    WatchRequest,
    build_all,
)
from protocol.result import RunError, RunUsage, TerminalStatus
from protocol.transcript import CallItem, ReplyItem, ResultItem, RewindItem, StartItem
from tests.protocol.strategies import (
    finite_floats,
    json_objects,
    json_values,
    names,
    non_negative,
    nonempty_text,
    output_contracts,
    positive_floats,
    request_ids,
    short_text,
)

# `st.builds` reads a model's signature, which pydantic completes only when the model is built;
# the API's models are built at first use (protocol/api.py), so build them all first.
build_all()

WEEK_S = 7 * 24 * 3600.0

task_ids = st.text(min_size=1, max_size=64)
task_states: st.SearchStrategy[TaskState] = st.sampled_from(get_args(TaskState))
fractions = st.floats(min_value=0.0, max_value=1.0, exclude_min=True)


def _maybe(strategy: st.SearchStrategy[Any]) -> st.SearchStrategy[Any]:
    return st.none() | strategy


# ---- requests ------------------------------------------------------------------------------

task_specs = st.builds(
    TaskSpec,
    instruction=nonempty_text,
    model=_maybe(names),
    mcp=st.lists(names, max_size=3),
    limits=st.builds(
        SpecLimits,
        max_steps=_maybe(st.integers(1, 100_000)),
        max_tokens=_maybe(st.integers(min_value=1, max_value=2**40)),
        deadline_s=_maybe(st.floats(min_value=0.0, max_value=WEEK_S, exclude_min=True)),
    ),
    output_contract=output_contracts,
    loop=st.builds(
        LoopOverrides,
        repeat_cap=_maybe(st.integers(1, 100)),
        idle_limit=_maybe(st.integers(1, 100)),
        keep_verbatim=_maybe(st.integers(0, 1000)),
        compaction_high_water=_maybe(fractions),
        vacuous_reasks=_maybe(st.integers(0, 10)),
        catalogue_bytes=_maybe(st.integers(0, 1_000_000)),
    ),
    retry=st.builds(RetryPolicy, max_attempts=st.integers(1, 10)),
    labels=st.dictionaries(st.text(max_size=64), st.text(max_size=256), max_size=3),
)

task_refs = st.builds(TaskRef, task_id=task_ids)

submit_requests = st.builds(
    SubmitRequest,
    id=request_ids,
    params=st.builds(
        SubmitParams, spec=task_specs, idempotency_key=_maybe(st.text(min_size=1, max_size=128))
    ),
)
get_requests = st.builds(GetRequest, id=request_ids, params=task_refs)
match_requests = st.builds(
    MatchRequest,
    id=request_ids,
    params=st.builds(
        MatchParams,
        prefix=st.text("t_0123456789ABCDEFGHJKMNPQRSTVWXYZabc", min_size=1, max_size=64),
        limit=st.integers(1, 100),
    ),
)
list_requests = st.builds(
    ListRequest,
    id=request_ids,
    params=st.builds(
        ListParams,
        state=_maybe(task_states),
        limit=st.integers(1, 1000),
        before=_maybe(task_ids),
        schedule_id=_maybe(task_ids),
        trigger=_maybe(st.text("abcdefghijklmnopqrstuvwxyz-", min_size=1, max_size=20)),
    ),
)
cancel_requests = st.builds(
    CancelRequest,
    id=request_ids,
    params=st.builds(CancelParams, task_id=task_ids, reason=st.text(max_size=1000)),
)
wait_requests = st.builds(
    WaitRequest,
    id=request_ids,
    params=st.builds(WaitParams, task_id=task_ids, timeout_s=_maybe(st.floats(0.0, WEEK_S))),
)
events_requests = st.builds(
    EventsRequest,
    id=request_ids,
    params=st.builds(EventsParams, task_id=task_ids, after_seq=non_negative, follow=st.booleans()),
)
watch_requests = st.builds(
    WatchRequest,
    id=request_ids,
    params=st.builds(WatchParams, task_ids=st.lists(task_ids, max_size=5)),
)
tree_requests = st.builds(TreeRequest, id=request_ids, params=task_refs)
node_handles = st.from_regex(r"\A0(\.[0-9]{1,4}){0,3}\Z")
transcript_requests = st.builds(
    TranscriptRequest,
    id=request_ids,
    params=st.builds(
        TranscriptParams,
        task_id=task_ids,
        handle=node_handles,
        after_seq=non_negative,
        limit=st.integers(1, 1000),
        wait_s=st.floats(0.0, 30.0),
    ),
)
status_requests = st.builds(StatusRequest, id=request_ids)

# ---- results -------------------------------------------------------------------------------

run_usages = st.builds(
    RunUsage,
    tokens_in=non_negative,
    tokens_out=non_negative,
    steps=non_negative,
    model_calls=non_negative,
    tool_calls=non_negative,
    cost_usd=st.floats(min_value=0.0, max_value=1e6),
)
statuses = _maybe(st.sampled_from(TerminalStatus))

task_views = st.builds(
    TaskView,
    task_id=task_ids,
    run_id=short_text,
    owner_uid=non_negative,
    state=task_states,
    status=statuses,
    exit_code=_maybe(st.integers(0, 255)),
    result=json_values,
    partial=st.booleans(),
    usage=run_usages,
    abort=st.sampled_from([None, "intelligence", "mcp"]),
    error=_maybe(st.builds(RunError, kind=short_text, message=short_text)),
    attempts=non_negative,
    instruction=short_text,
    model=_maybe(short_text),
    mcp=st.lists(short_text, max_size=3),
    created_at=finite_floats,
    started_at=_maybe(finite_floats),
    ended_at=_maybe(finite_floats),
    pid=_maybe(st.integers(1, 2**22)),
    schedule_id=_maybe(task_ids),
    trigger=_maybe(short_text),
    uri=_maybe(short_text),
    executor=_maybe(short_text),
    worker=_maybe(short_text),
    resumes=non_negative,
    forked_from=_maybe(st.builds(ForkOrigin, task_id=task_ids, step=non_negative)),
    throttled=_maybe(
        st.builds(ThrottleView, endpoint=short_text, blocked_by=short_text, waiting_s=positive_floats)
    ),
    deferred=_maybe(st.builds(DeferralView, until=finite_floats, reason=short_text)),
)
fork_requests = st.builds(
    ForkRequest,
    id=request_ids,
    params=st.builds(
        ForkParams,
        task_id=task_ids,
        from_step=non_negative,
        model=_maybe(names),
        instruction=_maybe(st.text(min_size=1, max_size=40)),
        idempotency_key=_maybe(st.text(min_size=1, max_size=128)),
    ),
)
step_items = st.one_of(
    st.builds(
        ReplyItem,
        text=st.text(max_size=40),
        tool_calls=st.lists(
            st.builds(CallItem, id=short_text, name=short_text, arguments=_maybe(st.just({"a": 1}))),
            max_size=2,
        ),
        tokens_in=_maybe(non_negative),
        tokens_out=_maybe(non_negative),
    ),
    st.builds(StartItem, call_id=short_text, name=short_text),
    st.builds(
        ResultItem, call_id=short_text, name=short_text, text=st.text(max_size=40), is_error=st.booleans()
    ),
    st.builds(RewindItem, to=non_negative, why=st.text(max_size=40)),
)
transcript_views = st.builds(
    TranscriptView,
    task_id=task_ids,
    handle=short_text,
    state=task_states,
    instruction=short_text,
    handles=st.lists(short_text, max_size=3),
    steps=st.lists(
        st.builds(TranscriptStep, seq=non_negative, ts=finite_floats, item=step_items), max_size=3
    ),
    next_seq=non_negative,
    more=st.booleans(),
)
node_views = st.builds(
    NodeView,
    handle=short_text,
    parent=_maybe(short_text),
    depth=non_negative,
    status=statuses,
    state=st.sampled_from(["starting", "running", "terminal"]),
    pid=_maybe(st.integers(1, 2**22)),
    usage=run_usages,
    grant_steps=_maybe(non_negative),
    grant_tokens=_maybe(non_negative),
)
daemon_statuses = st.builds(
    DaemonStatus,
    pid=st.integers(1, 2**22),
    version=short_text,
    uptime_s=positive_floats,
    draining=st.booleans(),
    queued=non_negative,
    running=non_negative,
    max_concurrent_tasks=non_negative,
    journal_ok=st.booleans(),
    degraded=st.lists(short_text, max_size=3),
    children=non_negative,
    triggers=st.dictionaries(st.sampled_from(["armed", "failed", "paused"]), non_negative, max_size=3),
    failed_triggers=st.lists(short_text, max_size=3),
)
submit_results = st.builds(SubmitResult, task_id=task_ids, state=task_states, created=st.booleans())
event_views = st.builds(EventView, seq=non_negative, ts=finite_floats, event=short_text, fields=json_objects)

# ---- schedules ---------------------------------------------------------------------------------

_common = {
    "max_runs": _maybe(st.integers(1, 10_000_000)),
    "missed": st.sampled_from(["skip", "catch_up_one"]),
    "overlap": st.sampled_from(["skip", "allow"]),
    "max_failures": st.integers(1, 1000),
    "idle_backoff_max_s": st.floats(1, 366 * 86400.0),
    "max_total_tokens": _maybe(st.integers(min_value=1, max_value=2**40)),
}
schedule_specs = (
    st.builds(
        ScheduleSpec,
        kind=st.just("cron"),
        cron=st.sampled_from(["0 7 * * 1-5", "*/7 * * * *"]),
        tz=_maybe(st.sampled_from(["UTC", "Europe/Berlin"])),
        **_common,
    )
    | st.builds(ScheduleSpec, kind=st.just("interval"), every_s=st.floats(1, 366 * 86400.0), **_common)
    | st.builds(ScheduleSpec, kind=st.just("loop"), interval_s=st.floats(0, 366 * 86400.0), **_common)
)
schedule_refs = st.builds(ScheduleRef, schedule_id=task_ids)
schedule_create_requests = st.builds(
    ScheduleCreateRequest,
    id=request_ids,
    params=st.builds(
        ScheduleCreateParams,
        spec=task_specs,
        trigger=schedule_specs,
        idempotency_key=_maybe(st.text(min_size=1, max_size=128)),
    ),
)
schedule_list_requests = st.builds(
    ScheduleListRequest,
    id=request_ids,
    params=st.builds(
        ScheduleListParams,
        state=_maybe(st.sampled_from(["active", "paused", "ended"])),
        limit=st.integers(1, 1000),
        after=_maybe(st.text(min_size=1, max_size=64)),
    ),
)
schedule_views = st.builds(
    ScheduleView,
    schedule_id=task_ids,
    owner_uid=non_negative,
    name=_maybe(short_text),
    trigger=schedule_specs,
    instruction=short_text,
    state=st.sampled_from(["active", "paused", "ended"]),
    note=_maybe(short_text),
    next_fire_at=_maybe(finite_floats),
    runs=non_negative,
    failures=non_negative,
    skipped=non_negative,
    tokens_used=non_negative,
    pause_s=_maybe(finite_floats),
    last_task_id=_maybe(task_ids),
    last_status=statuses,
    last_error=_maybe(short_text),
    last_fire_at=_maybe(finite_floats),
    created_at=finite_floats,
)
schedule_create_results = st.builds(
    ScheduleCreateResult,
    schedule_id=task_ids,
    state=st.sampled_from(["active", "paused", "ended"]),
    next_fire_at=_maybe(finite_floats),
    created=st.booleans(),
)


def _ref_requests(cls: type[Request[ScheduleView]]) -> st.SearchStrategy[Request[Any]]:
    return st.builds(cls, id=request_ids, params=schedule_refs)


approval_list_requests = st.builds(
    ApprovalListRequest,
    id=request_ids,
    params=st.builds(ApprovalListParams, task_id=_maybe(task_ids), limit=st.integers(1, 1000)),
)
approval_decide_requests = st.builds(
    ApprovalDecideRequest,
    id=request_ids,
    params=st.builds(
        ApprovalDecideParams,
        task_id=task_ids,
        call=_maybe(task_ids),
        approve=st.booleans(),
        reason=_maybe(short_text),
    ),
)
approval_views = st.builds(
    ApprovalView,
    call=task_ids,
    task_id=task_ids,
    handle=short_text,
    owner_uid=non_negative,
    server=short_text,
    tool=short_text,
    arguments=json_values,
    instruction=short_text,
    state=st.sampled_from(["pending", "approved", "denied", "expired", "withdrawn"]),
    requested_at=finite_floats,
    expires_at=finite_floats,
    decided_at=_maybe(finite_floats),
    decided_by=_maybe(non_negative),
    reason=_maybe(short_text),
)


# ---- triggers ----------------------------------------------------------------------------------

trigger_names = st.text("abcdefghijklmnopqrstuvwxyz-", min_size=1, max_size=20)
budgets_views = st.builds(
    BudgetsView,
    now=finite_floats,
    lines=st.lists(
        st.builds(
            BudgetLine,
            kind=st.sampled_from(["uid", "trigger", "schedule"]),
            name=short_text,
            owner_uid=_maybe(non_negative),
            day=short_text,
            zone=short_text,
            resets_at=finite_floats,
            spent_usd=st.floats(min_value=0, max_value=1e6),
            spent_tokens=non_negative,
            cap_usd=_maybe(st.floats(min_value=0, max_value=1e6)),
            cap_tokens=_maybe(non_negative),
        ),
        max_size=3,
    ),
    deferred=st.lists(
        st.builds(
            DeferredTaskView,
            task_id=task_ids,
            owner_uid=non_negative,
            trigger=_maybe(short_text),
            schedule_id=_maybe(task_ids),
            until=finite_floats,
            reason=short_text,
        ),
        max_size=3,
    ),
)
trigger_views = st.builds(
    TriggerView,
    name=trigger_names,
    server=trigger_names,
    uri=_maybe(short_text),
    glob=_maybe(short_text),
    state=st.sampled_from(["starting", "armed", "unsupported", "backoff", "failed", "paused"]),
    deliveries=non_negative,
    dropped=non_negative,
    tasks_started=non_negative,
    inflight=non_negative,
    waiting=non_negative,
    last_fired_at=_maybe(finite_floats),
    last_error=_maybe(short_text),
    subscribed=non_negative,
)


def _trigger_requests(cls: type[Request[TriggerView]]) -> st.SearchStrategy[Request[Any]]:
    return st.builds(cls, id=request_ids, params=st.builds(TriggerRef, name=trigger_names))


# Every method: its requests, and the results that answer them.
METHOD_STRATEGIES: dict[str, tuple[st.SearchStrategy[Request[Any]], st.SearchStrategy[Any]]] = {
    "task.submit": (submit_requests, submit_results),
    "task.get": (get_requests, task_views),
    "task.list": (list_requests, st.lists(task_views, max_size=3)),
    "task.match": (match_requests, st.builds(TaskMatches, task_ids=st.lists(task_ids, max_size=3))),
    "task.cancel": (cancel_requests, task_views),
    "task.wait": (wait_requests, task_views),
    "task.events": (events_requests, task_views),
    "task.watch": (watch_requests, st.builds(WatchEnded)),
    "task.tree": (tree_requests, st.lists(node_views, max_size=3)),
    "task.transcript": (transcript_requests, transcript_views),
    "task.fork": (fork_requests, submit_results),
    "task.extend": (
        st.builds(
            ExtendRequest,
            id=request_ids,
            params=st.builds(
                ExtendParams,
                task_id=task_ids,
                steps=_maybe(st.integers(1, 100_000)),
                tokens=_maybe(st.integers(min_value=1, max_value=2**40)),
                deadline_s=_maybe(st.floats(min_value=0.0, max_value=WEEK_S, exclude_min=True)),
            ),
        ),
        task_views,
    ),
    "daemon.status": (status_requests, daemon_statuses),
    "schedule.create": (schedule_create_requests, schedule_create_results),
    "schedule.list": (schedule_list_requests, st.lists(schedule_views, max_size=3)),
    "schedule.get": (_ref_requests(ScheduleGetRequest), schedule_views),
    "schedule.pause": (_ref_requests(SchedulePauseRequest), schedule_views),
    "schedule.resume": (_ref_requests(ScheduleResumeRequest), schedule_views),
    "schedule.delete": (_ref_requests(ScheduleDeleteRequest), schedule_views),
    "approval.list": (approval_list_requests, st.lists(approval_views, max_size=3)),
    "approval.decide": (approval_decide_requests, approval_views),
    "trigger.list": (st.builds(TriggerListRequest, id=request_ids), st.lists(trigger_views, max_size=3)),
    "trigger.pause": (_trigger_requests(TriggerPauseRequest), trigger_views),
    "trigger.resume": (_trigger_requests(TriggerResumeRequest), trigger_views),
    "trigger.restart": (_trigger_requests(TriggerRestartRequest), trigger_views),
    "budget.list": (st.builds(BudgetsRequest, id=request_ids), budgets_views),
}
