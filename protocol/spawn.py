"""The spawn payload: everything a subagent needs to run one task (docs/design.md §4).

The supervisor mints identity (task id, run id, handle, depth) and limits; the child never
trusts a value it could have chosen itself. Secrets are `SecretStr`: they print masked and are
serialised in clear only when the encoder passes `context={"reveal_secrets": True}` — which
only the control-channel encoder of `ctrl/spawn` does.
"""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    SecretStr,
    SerializationInfo,
    field_serializer,
    model_validator,
)

# Re-exported: they were defined here, and the payload is made of them.
from protocol.contract import OutputContract as OutputContract
from protocol.mcp_catalogue import MAX_PAYLOAD_CATALOGUES, McpCatalogue
from protocol.names import Handle as Handle
from protocol.names import Name as Name
from protocol.transcript import StepItem

REVEAL_SECRETS: dict[str, object] = {"reveal_secrets": True}


class _Wire(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


def _reveal(value: SecretStr | None, info: SerializationInfo) -> str | None:
    if value is None:
        return None
    context = info.context
    if isinstance(context, dict) and context.get("reveal_secrets") is True:
        return value.get_secret_value()
    return "**********"


class SeedMessage(_Wire):
    """A parent-provided context slice (never a parent transcript)."""

    role: Literal["user", "assistant"]
    content: str = Field(max_length=200_000)


class EndpointSpec(_Wire):
    """One intelligence endpoint. An ordered list of them fails over (docs/design.md §5)."""

    name: Name = "default"
    kind: Literal["openai", "anthropic", "scripted"]
    base_url: str | None = Field(default=None, max_length=2048)
    model: str = Field(default="", max_length=256)
    api_key: SecretStr | None = None
    headers: dict[str, str] = Field(default_factory=dict)
    script_path: str | None = Field(default=None, max_length=4096)
    stream: bool = False
    # auto: native tool calls, switching the run to JSON actions when the endpoint or model
    # shows it has none (docs/loop.md "Native tools and JSON actions").
    tool_mode: Literal["native", "json", "auto"] = "auto"
    context_window: int = Field(default=128_000, ge=1024)
    max_output_tokens: int | None = Field(default=None, ge=1)
    # Sent with every request when set; unset leaves the server's own default.
    temperature: float | None = Field(default=None, ge=0, le=2)
    request_timeout_s: float = Field(default=120.0, gt=0)
    # Non-streaming: once the response has begun, the longest silence between body chunks.
    read_idle_timeout_s: float = Field(default=30.0, gt=0)
    first_token_timeout_s: float = Field(default=60.0, gt=0)
    stream_idle_timeout_s: float = Field(default=30.0, gt=0)
    # The endpoint accepts images (OpenAI `image_url` parts, Anthropic `image` blocks).
    images: bool = False
    # The daemon holds provider limits for it: each request asks for a slot first (`sup/slot`).
    limited: bool = False

    @field_serializer("api_key")
    def _ser_api_key(self, value: SecretStr | None, info: SerializationInfo) -> str | None:
        return _reveal(value, info)

    @model_validator(mode="after")
    def _check_kind(self) -> EndpointSpec:
        if self.kind == "scripted" and not self.script_path:
            raise ValueError("a scripted endpoint needs script_path")
        if self.kind != "scripted" and not self.base_url:
            raise ValueError(f"an {self.kind} endpoint needs base_url")
        return self


class OAuthSpec(_Wire):
    """OAuth 2 client credentials for a remote MCP server (a service's unattended flows only)."""

    method: Literal["client_secret_basic", "client_secret_post", "private_key_jwt"] = "client_secret_basic"
    client_id: str = Field(min_length=1, max_length=512)
    client_secret: SecretStr | None = None
    # PEM private key that signs the `private_key_jwt` assertion.
    private_key: SecretStr | None = None
    jwt_algorithm: str = Field(default="RS256", max_length=16)
    scope: str | None = Field(default=None, max_length=2048)
    # The authorization server the credentials belong to; tokens are requested only from it.
    issuer: str | None = Field(default=None, max_length=2048)

    @field_serializer("client_secret", "private_key")
    def _ser_secret(self, value: SecretStr | None, info: SerializationInfo) -> str | None:
        return _reveal(value, info)

    @model_validator(mode="after")
    def _check_method(self) -> OAuthSpec:
        if self.method == "private_key_jwt" and self.private_key is None:
            raise ValueError("private_key_jwt needs a private key")
        if self.method != "private_key_jwt" and self.client_secret is None:
            raise ValueError(f"{self.method} needs a client secret")
        return self


class OAuthLoginSpec(_Wire):
    """An authorization-code (PKCE) login an operator made with `agentd mcp login NAME`.

    The subagent reads and refreshes the tokens in `token_file` (0600, in the daemon's state
    directory); it never runs the browser step itself.
    """

    token_file: str = Field(min_length=1, max_length=4096)
    # A pre-registered public client; None: the login registered one dynamically (RFC 7591).
    client_id: str | None = Field(default=None, min_length=1, max_length=512)
    scope: str | None = Field(default=None, max_length=2048)
    # The loopback port of the login's redirect URI; 0: any free port (RFC 8252 §7.3).
    redirect_port: int = Field(default=0, ge=0, le=65535)


McpLogLevel = Literal["debug", "info", "notice", "warning", "error", "critical", "alert", "emergency"]


class McpServerSpec(_Wire):
    """One granted MCP server: how to reach it and which of its tools are in scope."""

    name: Name
    transport: Literal["stdio", "http", "sse"]
    command: list[str] = Field(default_factory=list, max_length=256)
    env: dict[str, SecretStr] = Field(default_factory=dict)
    cwd: str | None = None
    url: str | None = Field(default=None, max_length=2048)
    headers: dict[str, SecretStr] = Field(default_factory=dict)
    required: bool = True
    # Invariant: None grants every tool the server lists; a list grants exactly those names.
    tools: list[str] | None = None
    trust: list[str] = Field(default_factory=list)
    connect_timeout_s: float = Field(default=30.0, gt=0)
    call_timeout_s: float = Field(default=120.0, gt=0)
    # The `logging/setLevel` sent after connecting (2026: the per-request log opt-in); None: none.
    log_level: McpLogLevel | None = None
    oauth: OAuthSpec | None = None
    oauth_login: OAuthLoginSpec | None = None
    # Tool-name globs whose calls wait for a person's approval. Invariant: a nested
    # child's payload copies its parent's specs, so a child's gate is never narrower.
    approval: list[Annotated[str, Field(min_length=1, max_length=200)]] = Field(
        default_factory=list, max_length=128
    )
    # Each approval request is denied once this passes without a decision.
    approval_timeout_s: float = Field(default=3600.0, gt=0)
    # Tool-name globs safe to run again: a call of one that was in flight when its run was
    # interrupted is run again on resume; any other gets "interrupted: outcome unknown".
    idempotent: list[Annotated[str, Field(min_length=1, max_length=200)]] = Field(
        default_factory=list, max_length=128
    )

    @field_serializer("env", "headers")
    def _ser_secret_map(self, value: dict[str, SecretStr], info: SerializationInfo) -> dict[str, str | None]:
        return {k: _reveal(v, info) for k, v in value.items()}

    @model_validator(mode="after")
    def _check_transport(self) -> McpServerSpec:
        if self.transport == "stdio" and not self.command:
            raise ValueError("a stdio MCP server needs a command")
        if self.transport in ("http", "sse") and not self.url:
            raise ValueError(f"an {self.transport} MCP server needs a url")
        return self


class Limits(_Wire):
    """The grant this run may spend; `deadline_s` is the time remaining at spawn."""

    max_steps: int = Field(default=40, ge=1, le=100_000)
    max_tokens: int = Field(default=200_000, ge=1)
    deadline_s: float = Field(default=600.0, gt=0)
    remaining_depth: int = Field(default=4, ge=0, le=16)
    # The task tree's cost budget in USD (the supervisor counts it; docs/budgets.md); None: none.
    max_cost_usd: float | None = Field(default=None, gt=0)


class LoopKnobs(_Wire):
    """The agentic loop's tunables, defaults per docs/design.md §5."""

    repeat_cap: int = Field(default=3, ge=1)
    idle_limit: int = Field(default=3, ge=1)
    keep_verbatim: int = Field(default=5, ge=0)
    compaction_high_water: float = Field(default=0.75, gt=0, le=1)
    transport_retries: int = Field(default=3, ge=0, le=10)
    backoff_initial_s: float = Field(default=0.1, gt=0)
    backoff_max_s: float = Field(default=5.0, gt=0)
    vacuous_reasks: int = Field(default=1, ge=0)
    catalogue_bytes: int = Field(default=4000, ge=0)


class WarmSpec(_Wire):
    """A warm session's budgets (`warm = true`; docs/warm-sessions.md). The session's own
    budget is the payload's `limits` (tokens and steps over its life, its lifetime as
    `deadline_s`); these bound each delivery's turn and the wait between deliveries."""

    # Per delivery: a turn that spends one of these ends with that status; the session goes on.
    turn_max_steps: int = Field(default=20, ge=1, le=100_000)
    turn_max_tokens: int = Field(default=50_000, ge=1)
    turn_deadline_s: float = Field(default=300.0, gt=0, le=86_400)
    # No delivery for this long: the session ends cleanly (`completed`, `idle`).
    idle_timeout_s: float = Field(default=3600.0, gt=0, le=7 * 86_400)


class Telemetry(_Wire):
    log_level: Literal["debug", "info", "warning", "error"] = "info"
    capture_content: bool = False
    traceparent: str | None = Field(default=None, max_length=128)


class SpawnPayload(_Wire):
    """The `ctrl/spawn` params: the whole task, as the supervisor minted it."""

    task_id: str = Field(min_length=1, max_length=64)
    run_id: str = Field(min_length=1, max_length=64)
    handle: Handle = "0"
    depth: int = Field(default=0, ge=0, le=16)
    instruction: str = Field(min_length=1, max_length=1_000_000)
    output_contract: OutputContract = OutputContract()
    context_seed: list[SeedMessage] = Field(default_factory=list, max_length=256)
    intelligence: list[EndpointSpec] = Field(min_length=1, max_length=16)
    mcp_servers: list[McpServerSpec] = Field(default_factory=list, max_length=64)
    limits: Limits = Limits()
    loop: LoopKnobs = LoopKnobs()
    telemetry: Telemetry = Telemetry()
    notes_path: str | None = Field(default=None, max_length=4096)
    # A warm session (route = "continue"): after each answer, report `ev/turn` and wait for
    # the next `ctrl/inject` instead of exiting; `session` bounds each turn and the idle wait.
    warm: bool = False
    session: WarmSpec = WarmSpec()
    # A loop schedule's run: offer the `nothing_to_do` self-tool, whose call makes the run's
    # result `idle` (the schedule then backs off; docs/design.md §11).
    idle_signal: bool = False
    # Granted servers' catalogues as a resource watcher last listed them (a trigger's task): the
    # first model request offers these while the task connects those servers in the background.
    mcp_catalogues: dict[Name, McpCatalogue] = Field(default_factory=dict, max_length=MAX_PAYLOAD_CATALOGUES)
    # A prestarted child (a trigger's task, forked while its URI's debounce window is open): open
    # the model client and the hinted tools, then wait for `ctrl/go` — at most this many seconds,
    # else end without running — before anything the task does (no model call, no MCP connect).
    hold_s: float | None = Field(default=None, gt=0, le=3600)
    # A resumed run: the node's journaled transcript, in order. The loop replays it (no model
    # call is asked again, no journaled tool call runs again) and goes on live from its end
    # (docs/durability.md).
    replay: list[StepItem] = Field(default_factory=list, max_length=1_000_000)
    # Hand each step to the supervisor to journal (`sup/record`), waiting for each commit. Off
    # only where nothing journals (the zygote's warm-up run) and for warm sessions.
    record_steps: bool = True
    # When the budget is about to run out, ask the model for a last answer with tools off (the
    # wrap-up turn, docs/loop.md). Off for a task that pauses at its budget (`on_budget = "pause"`):
    # it goes on.
    wrap_up: bool = True

    @model_validator(mode="after")
    def _unique_servers(self) -> SpawnPayload:
        names = [s.name for s in self.mcp_servers]
        if len(names) != len(set(names)):
            raise ValueError("mcp_servers names must be unique")
        unknown = sorted(set(self.mcp_catalogues) - set(names))
        if unknown:
            raise ValueError(f"mcp_catalogues names servers that are not granted: {', '.join(unknown)}")
        return self
