"""The loop's transitions (docs/loop.md, "One turn"): what to do next, and how each outcome changes the state.

    next_action(state, view, now, cancelled)      -> CallModel | CallTools | Finish
    on_model_reply(state, action, reply, ...)     -> state   (turn, or the compaction call)
    on_tool_results(state, outcomes, ...)         -> state
    on_context_overflow(state, action)            -> (state, fatal)
    on_tools_rejected(state, action)              -> (state, fatal)

Pure: the driver supplies time, the cancel flag and the environment (`TurnView`).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace

from protocol.result import RunUsage, TerminalStatus, interrupted_status
from protocol.spawn import SpawnPayload
from subagent.loop import (
    constrain,
    context,
    feedback,
    progress,
    prompt,
    stop,
    tool_mode,
    verify,
    window,
    wrapup,
)
from subagent.loop.action import (
    ACTION_FORMAT,
    FinalAction,
    ParseFailure,
    RefuseAction,
    ToolAction,
    parse_action,
)
from subagent.loop.final import on_final, on_refusal
from subagent.loop.state import (
    Action,
    Budgets,
    CallModel,
    CallTools,
    Contract,
    Finish,
    LoopConfig,
    LoopState,
    Note,
    PlannedCall,
    Terminal,
)
from subagent.loop.steps import (
    append,
    end_idle_turn,
    end_turn,
    finish,
    heard,
    message_chars,
    note_error,
    remember_partial,
    request_chars,
    reset_transcript,
    say,
    step_note,
    terminal_for,
)
from subagent.loop.view import TurnView as TurnView  # re-exported: the driver builds it
from subagent.messages import (
    AssistantMessage,
    Message,
    ModelReply,
    ModelRequest,
    ResponseSchema,
    ToolCall,
    ToolOutcome,
    ToolResultMessage,
    UserMessage,
    estimate_tokens,
    unoffered_text,
)

__all__ = [
    "TurnView",
    "initial_state",
    "message_chars",
    "next_action",
    "on_context_overflow",
    "on_model_reply",
    "on_tool_results",
    "on_tools_rejected",
    "terminal_for",
    "with_json_actions",
]


def initial_state(payload: SpawnPayload, *, now: float) -> LoopState:
    """The state before the first turn, from the spawn payload."""
    primary = payload.intelligence[0]
    oc = payload.output_contract
    config = LoopConfig(
        max_steps=payload.limits.max_steps,
        max_tokens=payload.limits.max_tokens,
        deadline=now + payload.limits.deadline_s,
        repeat_cap=payload.loop.repeat_cap,
        idle_limit=payload.loop.idle_limit,
        keep_verbatim=payload.loop.keep_verbatim,
        high_water=payload.loop.compaction_high_water,
        context_window=primary.context_window,
        vacuous_reasks=payload.loop.vacuous_reasks,
        tool_mode="json" if primary.tool_mode == "json" else "native",
        # The scripted model plays its script's tool calls natively; there is nothing to detect.
        auto_tool_mode=primary.tool_mode == "auto" and primary.kind != "scripted",
        contract=Contract(
            format=oc.format,
            schema=oc.schema_,
            objective=oc.objective,
            success_criteria=tuple(oc.success_criteria),
        ),
        max_output_tokens=primary.max_output_tokens,
        wrap_up=payload.wrap_up,
    )
    head: list[Message] = [UserMessage(payload.instruction, kind="instruction")]
    for seed in payload.context_seed:
        head.append(
            UserMessage(seed.content, kind="seed") if seed.role == "user" else AssistantMessage(seed.content)
        )
    return LoopState(config=config, head=tuple(head), chars=sum(message_chars(m) for m in head))


# ---- next action ---------------------------------------------------------------------------


def next_action(state: LoopState, view: TurnView, *, now: float, cancelled: bool) -> Action:
    """Decide the next step: finish, run pending tool calls, compact, or call the model."""
    if state.terminal is not None:
        return Finish(state.terminal)
    if state.pending is not None:
        status = interrupted_status(cancelled=cancelled, past_deadline=now >= state.config.deadline)
        if status is not None:
            return Finish(terminal_for(state, status))
        return CallTools(tuple(p.call for p in state.pending if p.refusal is None))

    cfg = state.config
    if view.system is None or view.tool_mode != cfg.tool_mode:
        view = TurnView.build(cfg, view.tools, view.resources, view.tools_chars, view.ungranted)
    assert view.system is not None
    tools = view.offered
    json_actions = cfg.tool_mode == "json"
    request = ModelRequest(
        system=view.system,
        messages=(*state.head, *state.transcript),
        tools=() if json_actions else tools,
        purpose="turn",
        max_output_tokens=cfg.max_output_tokens,
        json_actions=json_actions,
        response_schema=view.actions,
    )
    chars = len(view.system) + state.chars + view.tools_chars
    last_call = state.budgets.last_call
    last_prompt = last_call.tokens_in if last_call is not None else None
    estimate = stop.estimate_next(chars, last_prompt)
    closing = wrapup.message(cfg, TerminalStatus.EXHAUSTED_STEPS)
    wrap_estimate = stop.estimate_next(len(view.system) + state.chars + len(closing.text), last_prompt)
    # Stop when not even the smallest wrap-up call fits what is left of the token budget.
    halt = stop.pre_call_stop(
        state, now=now, cancelled=cancelled, estimate=wrap_estimate + wrapup.MIN_WRAP_UP_OUTPUT_TOKENS
    )
    if halt is not None:
        return Finish(terminal_for(state, halt))
    wrap = wrapup.plan(state, turn_estimate=estimate, wrap_estimate=wrap_estimate) if cfg.wrap_up else None
    wants_compaction = state.force_compaction or (
        wrap is None
        and stop.needs_compaction(estimate, cfg.context_window, cfg.high_water)
        and _worth_compacting(state)
    )
    if wants_compaction and _compactable(state.transcript):
        compact = ModelRequest(
            system=context.COMPACTION_SYSTEM,
            messages=context.compaction_messages(state.head, state.transcript),
            purpose="compact",
            max_output_tokens=window.summary_tokens(cfg.context_window),
            # A request without tools carries earlier tool turns as text: some APIs (Anthropic)
            # refuse tool-use blocks in a request that defines no tools.
            json_actions=True,
        )
        return CallModel(compact, offered=frozenset())
    if wrap is not None:
        last = ModelRequest(
            system=view.system,
            messages=(*state.head, *state.transcript, wrapup.message(cfg, wrap.status)),
            purpose="wrap_up",
            max_output_tokens=wrap.max_output_tokens,
            json_actions=True,  # no tools, so tool turns as text (above)
            response_schema=_wrap_up_schema(cfg),
        )
        return CallModel(last, offered=frozenset(), wrap_up=wrap.status)
    return CallModel(request, offered=frozenset(t.name for t in tools), ungranted=view.ungranted)


def _wrap_up_schema(cfg: LoopConfig) -> ResponseSchema | None:
    """The wrap-up answer's constraint: a `final` (or `refuse`) action in JSON-action mode, else
    the output schema of a JSON contract."""
    if cfg.tool_mode == "json":
        return constrain.action_schema((), cfg.contract, tools_allowed=False)
    return constrain.output_schema(cfg.contract)


def _verbatim_results(state: LoopState) -> list[ToolResultMessage]:
    return [m for m in state.transcript if isinstance(m, ToolResultMessage) and not m.stubbed]


def _kept_after_compaction(state: LoopState) -> int:
    sizes = [len(m.text) for m in _verbatim_results(state)]
    return window.kept_after_compaction(sizes, state.config.keep_verbatim, state.config.context_window)


def _worth_compacting(state: LoopState) -> bool:
    """Lever 2 only when it frees meaningful room (loop/window.py); computed only near the mark."""
    keep = _kept_after_compaction(state)
    kept = sum(len(m.text) for m in _verbatim_results(state)[-keep:]) if keep else 0
    return window.worth_compacting(
        transcript_chars=sum(message_chars(m) for m in state.transcript),
        kept_chars=kept,
        context_window=state.config.context_window,
    )


def _compactable(transcript: tuple[Message, ...]) -> bool:
    if not transcript:
        return False
    return not (
        len(transcript) == 1 and isinstance(transcript[0], UserMessage) and transcript[0].kind == "summary"
    )


# ---- model replies -------------------------------------------------------------------------


def _record_usage(state: LoopState, request: ModelRequest, reply: ModelReply, *, step: bool) -> Budgets:
    if reply.usage is not None:
        t_in, t_out = reply.usage.tokens_in, reply.usage.tokens_out
    else:
        reply_chars = len(reply.text) + sum(len(c.raw_arguments) for c in reply.tool_calls)
        t_in, t_out = estimate_tokens(request_chars(request)), estimate_tokens(reply_chars)
    call = RunUsage(tokens_in=t_in, tokens_out=t_out, steps=1 if step else 0, model_calls=1)
    return replace(state.budgets, used=state.budgets.used + call, last_call=call)


def on_model_reply(
    state: LoopState, action: CallModel, reply: ModelReply, *, now: float, cancelled: bool
) -> LoopState:
    """Record a model call's usage and branch on its reply (docs/loop.md, "One turn")."""
    if action.request.purpose == "compact":
        return _on_compacted(state, action.request, reply)
    if reply.unparsed_tool_call and action.wrap_up is None and _may_switch(state):
        return _on_unparsed_tool_call(state, action, reply)
    state = replace(
        state,
        budgets=_record_usage(state, action.request, reply, step=True),
        notes=(),
        overflow_retried=False,
    )
    if reply.refusal is not None:
        return finish(
            state, TerminalStatus.REFUSED, reply.refusal or "refused by the model provider", "refused"
        )
    if action.wrap_up is not None:
        return _on_wrap_up(state, action.wrap_up, reply)
    if reply.malformed is not None:
        state, _ = say(
            state,
            f"Your previous reply could not be used ({reply.malformed}). "
            "Reply again with a tool call or your final answer.",
        )
        state = note_error(state, "malformed_reply", reply.malformed)
        return end_idle_turn(state, "malformed", None, now, cancelled)

    if state.config.tool_mode == "json":
        return _on_json_reply(
            state, reply, action.offered, now=now, cancelled=cancelled, ungranted=action.ungranted
        )

    if reply.tool_calls:
        state = replace(state, native_calls_seen=True)
    elif _may_switch(state) and not state.native_calls_seen:
        written = tool_mode.written_tool_call(reply.text, action.offered - {prompt.REFUSE_TOOL})
        if written is not None:
            return _on_written_tool_call(
                state,
                reply,
                written,
                action.offered,
                now=now,
                cancelled=cancelled,
                ungranted=action.ungranted,
            )

    state = remember_partial(state, reply.text)
    refusal = next((c for c in reply.tool_calls if c.name == prompt.REFUSE_TOOL), None)
    if refusal is not None:
        reason = refusal.arguments.get("reason") if refusal.arguments else None
        return on_refusal(state, str(reason or reply.text), reply.text, now, cancelled)
    assistant = AssistantMessage(reply.text, reply.tool_calls)
    if reply.tool_calls:
        return _plan_calls(
            append(state, assistant),
            reply.text,
            reply.tool_calls,
            action.offered,
            now,
            cancelled,
            ungranted=action.ungranted,
        )
    return on_final(append(state, assistant), reply.text, reply.text, now, cancelled, action.offered)


def _may_switch(state: LoopState) -> bool:
    return state.config.auto_tool_mode and state.config.tool_mode == "native"


def _switch_to_json(state: LoopState, why: str, detail: str) -> LoopState:
    """Switch the run to JSON actions for good (the tool catalogue moves into the system prompt)."""
    state = replace(state, config=replace(state.config, tool_mode="json"))
    return note_error(state, why, f"switched the run to JSON actions: {detail}")


def _on_unparsed_tool_call(state: LoopState, action: CallModel, reply: ModelReply) -> LoopState:
    """The server could not parse its own model's tool call (typically prose and a fenced object):
    an `auto` run switches to JSON actions — constrained to the action union where the endpoint
    allows — and the same turn is asked again at once. The call's tokens count; no step is spent,
    since the model produced nothing the run could use."""
    budgets = _record_usage(state, action.request, reply, step=False)
    state = replace(state, budgets=budgets, notes=())
    assert reply.malformed is not None  # the adapter reports an unparsed call as malformed
    return _switch_to_json(state, "tool_call_unparsed", reply.malformed)


def _on_written_tool_call(
    state: LoopState,
    reply: ModelReply,
    written: ToolAction | str,
    offered: frozenset[str],
    *,
    now: float,
    cancelled: bool,
    ungranted: frozenset[str] = frozenset(),
) -> LoopState:
    """An `auto` run whose model wrote a tool call as text: switch to JSON actions, whose system
    prompt carries the instructions. A call written as JSON runs at once; a tool only named in
    prose gets the instructions as a re-ask (an idle turn)."""
    json_offered = offered - {prompt.REFUSE_TOOL}
    if isinstance(written, ToolAction):
        state = _switch_to_json(state, "prose_tool_call", f"the model wrote a call to {written.tool} as text")
        return _on_json_reply(state, reply, json_offered, now=now, cancelled=cancelled, ungranted=ungranted)
    state = _switch_to_json(state, "prose_tool_call", f"the model described a call to {written} in prose")
    state, _ = say(
        append(state, AssistantMessage(reply.text)),
        "You described a tool call instead of making one, so no tool ran. Tools are now called with "
        f"JSON actions. {ACTION_FORMAT}\nIf your previous reply was your final answer, send it again as "
        'a "final" action.',
    )
    return end_idle_turn(state, "prose_tool_call", None, now, cancelled)


def _on_json_reply(
    state: LoopState,
    reply: ModelReply,
    offered: frozenset[str],
    *,
    now: float,
    cancelled: bool,
    ungranted: frozenset[str] = frozenset(),
) -> LoopState:
    parsed = parse_action(reply.text)
    step = state.budgets.used.steps
    if isinstance(parsed, ParseFailure):
        state = append(state, AssistantMessage(reply.text))
        state, _ = say(state, f"Your reply was not a valid action object ({parsed.reason}). {ACTION_FORMAT}")
        state = note_error(state, "malformed_action", parsed.reason)
        return end_idle_turn(state, "malformed", None, now, cancelled)
    if isinstance(parsed, RefuseAction):
        return on_refusal(
            append(state, AssistantMessage(reply.text)), parsed.reason, reply.text, now, cancelled
        )
    if isinstance(parsed, ToolAction):
        call = ToolCall(
            id=f"act_{step}",
            name=parsed.tool,
            arguments=parsed.arguments,
            raw_arguments=progress.canonical_json(parsed.arguments),
        )
        state = append(state, AssistantMessage(reply.text, (call,)))
        return _plan_calls(state, reply.text, (call,), offered, now, cancelled, ungranted=ungranted)
    assert isinstance(parsed, FinalAction)
    state = append(state, AssistantMessage(reply.text))
    if isinstance(parsed.result, str):
        state = remember_partial(state, parsed.result)
    return on_final(state, parsed.result, reply.text, now, cancelled, offered)


def _plan_calls(
    state: LoopState,
    text: str,
    calls: Sequence[ToolCall],
    offered: frozenset[str],
    now: float,
    cancelled: bool,
    *,
    ungranted: frozenset[str] = frozenset(),
) -> LoopState:
    """Pre-execution checks per call: scope, then the repeat cap (docs/loop.md, "Repeats and
    progress"). A name not offered is refused as a tool that does not exist, or, when a granted
    server lists it outside this agent's grant (`ungranted`), as one not granted."""
    repeats = state.repeats
    planned: list[PlannedCall] = []
    cap = state.config.repeat_cap
    for call in calls:
        key = progress.repeat_key(call.name, call.arguments, call.raw_arguments)
        why = "out_of_scope"
        if call.name not in offered:
            refusal = unoffered_text(call.name, ungranted)
            why = "out_of_scope" if call.name in ungranted else "unknown_tool"
        else:
            repeats, n = progress.bump_repeat(repeats, key)
            why = "invalid_arguments" if call.arguments is None else "repeat_cap"
            if call.arguments is None:
                refusal = (
                    f"the arguments for `{call.name}` were not a valid JSON object "
                    f"({call.arguments_error or 'unparseable'}); call it again with a JSON object"
                )
            elif n > cap:
                refusal = (
                    f"you have called `{call.name}` with these arguments {n} times with no progress; "
                    "try a different approach or finish"
                )
            else:
                refusal = None
        if refusal is not None:
            # Logged without the observation's text: argument errors can quote model output.
            state = note_error(heard(state, refusal), "call_refused", f"{why}: {call.name[:64]}")
            refusal = feedback.mark(refusal)
        planned.append(PlannedCall(call=call, key=key, refusal=refusal))
    state = replace(state, repeats=repeats, pending=tuple(planned), pending_text=text)
    if all(p.refusal is not None for p in planned):
        return on_tool_results(state, (), now=now, cancelled=cancelled)
    return state


def on_tool_results(
    state: LoopState, outcomes: Sequence[ToolOutcome], *, now: float, cancelled: bool
) -> LoopState:
    """Append each call's observation in order, settle repeat counters, then the post-call stops."""
    assert state.pending is not None, "on_tool_results without pending calls"
    executed = iter(outcomes)
    repeats = state.repeats
    results: list[Message] = []
    observed: list[str] = []
    n_executed = 0
    for planned in state.pending:
        if planned.refusal is not None:
            outcome = ToolOutcome(planned.refusal, is_error=True)
        else:
            outcome = next(executed, ToolOutcome("the call did not complete", is_error=True))
            repeats = progress.settle_repeat(repeats, planned.key, outcome)
            n_executed += 1
        results.append(
            ToolResultMessage(
                planned.call.id, planned.call.name, outcome.text, outcome.is_error, images=outcome.images
            )
        )
        observed.append(f"{int(outcome.is_error)}:{outcome.text}")
    first = len(state.transcript)
    calls = {p.call.id: p.call for p in state.pending}
    verbatim = state.verbatim + tuple(
        (first + i, context.stub_text(calls.get(m.call_id), m.name))
        for i, m in enumerate(results)
        if isinstance(m, ToolResultMessage)
    )
    added = sum(message_chars(m) for m in results)
    transcript, verbatim, delta = context.stub_oldest(
        (*state.transcript, *results), verbatim, state.config.keep_verbatim
    )
    budgets = replace(state.budgets, used=state.budgets.used + RunUsage(tool_calls=n_executed))
    signature = progress.turn_signature(state.pending_text, observed)
    state = replace(
        state,
        transcript=transcript,
        chars=state.chars + added + delta,
        verbatim=verbatim,
        budgets=budgets,
        repeats=repeats,
        pending=None,
        pending_text="",
    )
    return end_turn(
        progress.record_signature(state, signature), "tools", now, cancelled, tool_calls=len(results)
    )


def _on_wrap_up(state: LoopState, status: TerminalStatus, reply: ModelReply) -> LoopState:
    """The wrap-up call's answer ends the run: a partial labeled with the budget that ran out."""
    result, partial, refused = wrapup.answer(state, reply, status)
    if refused:
        return finish(state, TerminalStatus.REFUSED, str(result), "refused")
    terminal = Terminal(status=status, result=result, partial=partial, reason="wrap_up")
    return replace(state, terminal=terminal, notes=(*state.notes, step_note(state, "wrap_up")))


# ---- compaction and overflow ---------------------------------------------------------------


def _on_compacted(state: LoopState, request: ModelRequest, reply: ModelReply) -> LoopState:
    budgets = _record_usage(state, request, reply, step=False)
    keep = _kept_after_compaction(state)
    if reply.malformed is not None or verify.is_vacuous(reply.text):
        transcript = context.mechanical_compaction(state.transcript, keep)
        how = "mechanical"
    else:
        transcript = context.compacted_transcript(reply.text, state.transcript, keep)
        how = "summary"
    note = Note(
        "loop.compact",
        {"how": how, "messages_before": len(state.transcript), "compactions": state.compactions + 1},
    )
    state = reset_transcript(state, transcript)
    return replace(
        state, budgets=budgets, compactions=state.compactions + 1, force_compaction=False, notes=(note,)
    )


def on_context_overflow(state: LoopState, action: CallModel) -> tuple[LoopState, bool]:
    """The endpoint rejected a request as too long: compact and retry once; `True` = fatal."""
    if action.request.purpose == "compact":
        transcript = context.mechanical_compaction(state.transcript, _kept_after_compaction(state))
        note = Note("loop.compact", {"how": "mechanical", "messages_before": len(state.transcript)})
        state = reset_transcript(state, transcript)
        return replace(state, force_compaction=False, compactions=state.compactions + 1, notes=(note,)), False
    if state.overflow_retried or not _compactable(state.transcript):
        return state, True
    return replace(state, force_compaction=True, overflow_retried=True, notes=()), False


def with_json_actions(state: LoopState) -> LoopState:
    """An `auto` run that starts in JSON actions (its endpoint is known to need them)."""
    return replace(state, config=replace(state.config, tool_mode="json"))


def on_tools_rejected(state: LoopState, action: CallModel, detail: str) -> tuple[LoopState, bool]:
    """The endpoint refused the request's tools: an `auto` run switches to JSON actions and asks
    again (no step is spent: nothing was generated); `True` = fatal (a `native` run, or no tools
    were sent, so switching cannot help)."""
    if action.request.purpose != "turn" or not action.request.tools or not _may_switch(state):
        return state, True
    return _switch_to_json(replace(state, notes=()), "tools_rejected", detail), False
