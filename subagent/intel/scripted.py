"""The scripted model: a deterministic, built-in intelligence that plays a JSON script.

It is a product feature (demos, docs, tests), documented in docs/scripted-model.md. Each
`purpose="turn"` request plays the next scripted turn; `purpose="compact"` requests return the
script's `summary`. The script is validated at open; an invalid one is an `IntelFatal` that
names the problem, never the content.
"""

from __future__ import annotations

import re
from dataclasses import replace
from pathlib import Path
from typing import Annotated, Literal

import anyio
from pydantic import BaseModel, ConfigDict, Field, JsonValue, ValidationError, model_validator

from protocol.spawn import EndpointSpec
from subagent.errors import ContextOverflow, IntelUnavailable
from subagent.intel.classify import EndpointFatal
from subagent.intel.endpoint import Prepared, Sent, request_chars
from subagent.intel.replies import decode_arguments, reply_chars
from subagent.messages import (
    ModelReply,
    ModelRequest,
    TokenUsage,
    ToolCall,
    ToolResultMessage,
    UserMessage,
    estimate_tokens,
)

MAX_SCRIPT_BYTES = 16 * 1024 * 1024
DEFAULT_SUMMARY = (
    "Summary of the conversation so far: the task is in progress; continue from the latest results."
)
LAST_TOOL_RESULT = "{last_tool_result}"
INSTRUCTION = "{instruction}"


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class ScriptedToolCall(_Strict):
    name: Annotated[str, Field(min_length=1, max_length=64)]
    arguments: dict[str, JsonValue] | None = None
    # A string sent as-is in place of `arguments`, to play a model that emits broken JSON.
    raw_arguments: str | None = None
    id: str | None = Field(default=None, min_length=1, max_length=128)

    @model_validator(mode="after")
    def _one_argument_form(self) -> ScriptedToolCall:
        if self.arguments is not None and self.raw_arguments is not None:
            raise ValueError("give either arguments or raw_arguments, not both")
        return self


class ScriptedUsage(_Strict):
    tokens_in: int = Field(ge=0)
    tokens_out: int = Field(ge=0)


class ScriptedTurn(_Strict):
    text: str = ""
    tool_calls: list[ScriptedToolCall] = Field(default_factory=list)
    refuse: str | None = None
    malformed: str | None = None
    delay_s: float = Field(default=0.0, ge=0, le=86_400)
    usage: ScriptedUsage | None = None
    fail: Literal["auth", "unavailable", "overflow"] | None = None


class Role(_Strict):
    """An alternative script for runs whose instruction matches `match` (a regular expression):
    how one script file plays a parent and its subagents differently."""

    match: str = Field(min_length=1, max_length=1000)
    turns: list[ScriptedTurn] = Field(min_length=1)
    after_end: Literal["repeat_last", "cycle", "error"] = "repeat_last"
    summary: str | None = None

    @model_validator(mode="after")
    def _compiles(self) -> Role:
        try:
            re.compile(self.match)
        except re.error as exc:
            raise ValueError(f"match is not a valid regular expression: {exc}") from None
        return self


class Script(_Strict):
    model: str = "scripted"
    turns: list[ScriptedTurn] = Field(min_length=1)
    after_end: Literal["repeat_last", "cycle", "error"] = "repeat_last"
    summary: str | None = None
    # Checked in order against the run's instruction at its first turn; no match plays `turns`.
    roles: list[Role] = Field(default_factory=list, max_length=64)

    def for_instruction(self, instruction: str) -> Script | Role:
        return next((r for r in self.roles if re.search(r.match, instruction)), self)


def load_script(path: str) -> Script:
    """Read and validate a script file; any problem is an `IntelFatal` naming it."""
    try:
        raw = Path(path).read_bytes()
    except OSError as exc:
        raise EndpointFatal(f"cannot read the script file {path}: {exc.strerror}", kind="config") from exc
    if len(raw) > MAX_SCRIPT_BYTES:
        raise EndpointFatal(f"the script file {path} exceeds {MAX_SCRIPT_BYTES} bytes", kind="config")
    try:
        return Script.model_validate_json(raw)
    except ValidationError as exc:
        problems = "; ".join(
            f"{'.'.join(str(p) for p in err['loc']) or '(root)'}: {err['msg']}" for err in exc.errors()[:5]
        )
        raise EndpointFatal(f"invalid script {path}: {problems}", kind="config") from exc


def fill(template: str, request: ModelRequest) -> str:
    """Replace `{last_tool_result}` and `{instruction}`; every other brace stays literal."""
    if "{" not in template:
        return template
    if LAST_TOOL_RESULT in template:
        results = [m.text for m in request.messages if isinstance(m, ToolResultMessage)]
        template = template.replace(LAST_TOOL_RESULT, results[-1] if results else "")
    if INSTRUCTION in template:
        users = [m.text for m in request.messages if isinstance(m, UserMessage)]
        template = template.replace(INSTRUCTION, users[0] if users else "")
    return template


def fill_json(value: JsonValue, request: ModelRequest) -> JsonValue:
    """`fill` applied to every string inside a JSON value."""
    if isinstance(value, str):
        return fill(value, request)
    if isinstance(value, list):
        return [fill_json(v, request) for v in value]
    if isinstance(value, dict):
        return {k: fill_json(v, request) for k, v in value.items()}
    return value


def play_turn(turn: ScriptedTurn, turn_no: int, request: ModelRequest, model: str) -> ModelReply:
    """The reply a scripted turn produces for `request` (pure; `fail` and `delay_s` are the caller's)."""
    if turn.malformed is not None:
        return ModelReply(malformed=turn.malformed, model=model)
    calls: list[ToolCall] = []
    for i, spec in enumerate(turn.tool_calls):
        call_id = spec.id or f"call_{turn_no}_{i}"
        if spec.raw_arguments is not None:
            calls.append(decode_arguments(call_id, spec.name, fill(spec.raw_arguments, request)))
        else:
            arguments = {k: fill_json(v, request) for k, v in (spec.arguments or {}).items()}
            calls.append(ToolCall(id=call_id, name=spec.name, arguments=arguments))
    reply = ModelReply(
        text=fill(turn.text, request),
        tool_calls=tuple(calls),
        refusal=fill(turn.refuse, request) if turn.refuse is not None else None,
        finish_reason="tool_calls" if calls else "stop",
        model=model,
    )
    return _with_usage(reply, request, turn.usage)


def _with_usage(reply: ModelReply, request: ModelRequest, override: ScriptedUsage | None) -> ModelReply:
    if override is not None:
        usage = TokenUsage(tokens_in=override.tokens_in, tokens_out=override.tokens_out)
    else:
        usage = TokenUsage(estimate_tokens(request_chars(request)), estimate_tokens(reply_chars(reply)))
    return replace(reply, usage=usage)


class ScriptedModel:
    """An `Endpoint` that plays a `Script`. Turn numbering counts `purpose="turn"` calls from 0."""

    def __init__(self, spec: EndpointSpec, script: Script, *, turns_played: int = 0) -> None:
        self._spec = spec
        self._file = script
        # The role this run plays is chosen at its first call, from its instruction.
        self._script: Script | Role | None = None
        # A resumed run starts after the turns its journal replayed.
        self._turns_played = turns_played

    @classmethod
    def open(cls, spec: EndpointSpec, *, turns_played: int = 0) -> ScriptedModel:
        """Load `spec.script_path` (raises `IntelFatal` on a missing or invalid script)."""
        return cls(spec, load_script(spec.script_path or ""), turns_played=turns_played)

    def _role(self, request: ModelRequest) -> Script | Role:
        if self._script is None:
            instruction = next((m.text for m in request.messages if isinstance(m, UserMessage)), "")
            self._script = self._file.for_instruction(instruction)
        return self._script

    @property
    def spec(self) -> EndpointSpec:
        return self._spec

    @property
    def model(self) -> str:
        return self._spec.model or self._file.model

    def prepare(self, request: ModelRequest) -> Prepared:
        return Prepared(request=request, payload=b"", size_bytes=request_chars(request))

    async def send(self, prepared: Prepared) -> Sent:
        request = prepared.request
        script = self._role(request)
        if request.purpose == "compact":
            summary = fill(script.summary or DEFAULT_SUMMARY, request)
            return Sent(
                _with_usage(ModelReply(text=summary, finish_reason="stop", model=self.model), request, None),
                None,
            )
        turn_no = self._turns_played
        turn = self._pick(script, turn_no)
        # Advance before any await: a cancelled turn is spent, as a real model call would be.
        self._turns_played += 1
        if turn.delay_s > 0:
            await anyio.sleep(turn.delay_s)
        if turn.fail == "auth":
            raise EndpointFatal("scripted failure: auth", kind="auth")
        if turn.fail == "unavailable":
            raise IntelUnavailable("scripted failure: unavailable")
        if turn.fail == "overflow":
            raise ContextOverflow("scripted failure: context overflow")
        return Sent(play_turn(turn, turn_no, request, self.model), None)

    @staticmethod
    def _pick(script: Script | Role, turn_no: int) -> ScriptedTurn:
        turns = script.turns
        if turn_no < len(turns):
            return turns[turn_no]
        if script.after_end == "cycle":
            return turns[turn_no % len(turns)]
        if script.after_end == "error":
            raise EndpointFatal(f"script exhausted after {len(turns)} turns", kind="config")
        return turns[-1]
