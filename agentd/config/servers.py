"""The named-service sections of `agentd.toml`: `[intelligence.<name>]` endpoints and
`[mcp.<name>]` servers.

A client names these from a task; it never supplies a URL, a command or a secret (docs/design.md §9).
Secrets are never written inline: the file names the environment variable or the file that
holds each one, and `agentd.config.secrets` reads it when a task needs it.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from pydantic import Field, SecretStr, field_validator
from pydantic.json_schema import SkipJsonSchema

from agentd.config.allow import entry_problem
from agentd.config.bundled import EMBEDDED_SCRIPT
from agentd.config.secrets import SecretSource
from agentd.config.sections import Section, TrustTag
from agentd.config.types import Command, ConfigPath, Duration, EnvName, HeaderName, Name, Seconds
from protocol.approval import MAX_PATTERNS, pattern_problem
from protocol.spawn import EndpointSpec, McpLogLevel, McpServerSpec, OAuthLoginSpec, OAuthSpec

DEFAULT_BASE_URLS: dict[str, str] = {
    "openai": "https://api.openai.com/v1",
    "anthropic": "https://api.anthropic.com",
}
# Header names that carry credentials; they must come from `*_from`/`api_key_*`, never inline.
CREDENTIAL_HEADERS = frozenset({"authorization", "proxy-authorization", "x-api-key", "api-key", "cookie"})
# Where `agentd mcp login` keeps each server's tokens, under the daemon's state directory.
TOKEN_DIR_NAME = "mcp-oauth"


def token_file(token_dir: Path, server: str) -> Path:
    """The file holding `server`'s login (server names are `Name`s: no separators, no dots first)."""
    return token_dir / f"{server}.json"


# The provider limits an endpoint may carry (the daemon enforces them across every task).
LIMIT_KEYS = ("max_concurrent_requests", "requests_per_minute", "tokens_per_minute")
# A chain is sent to the child whole; the spawn payload accepts at most 16 endpoints.
MAX_CHAIN = 16


def _endpoint_default(name: str) -> float:
    return float(EndpointSpec.model_fields[name].default)


def _server_default(name: str) -> float:
    return float(McpServerSpec.model_fields[name].default)


def _allow_entries(value: list[str] | None) -> list[str] | None:
    for entry in value or ():
        problem = entry_problem(entry)
        if problem is not None:
            raise ValueError(problem)
    return value


class PriceSection(Section):
    """What an endpoint's tokens cost, in USD per million tokens."""

    input: float = Field(ge=0, le=100_000, description="USD per million input tokens.")
    output: float = Field(ge=0, le=100_000, description="USD per million output tokens.")
    cached_input: float | None = Field(
        default=None,
        ge=0,
        le=100_000,
        description="USD per million input tokens read from the provider's prompt cache. Unset: input.",
    )


class IntelligenceSection(Section):
    """One model endpoint; `fallback` names the endpoints tried, in order, when it fails."""

    kind: Literal["openai", "anthropic", "scripted"] = Field(
        description="`openai`: chat completions (OpenAI, vLLM, Ollama, llama.cpp, LM Studio, LiteLLM, "
        "OpenRouter); `anthropic`: the Messages API; `scripted`: the built-in deterministic model."
    )
    base_url: str | None = Field(
        default=None,
        max_length=2048,
        description="Endpoint URL. Default: https://api.openai.com/v1 (openai), https://api.anthropic.com "
        "(anthropic). Not used by scripted.",
    )
    model: str = Field(default="", max_length=256, description="Model name sent to the endpoint.")
    api_key_env: EnvName | None = Field(
        default=None, description="Environment variable (of the daemon) that holds the API key."
    )
    api_key_file: ConfigPath | None = Field(
        default=None,
        description="File holding the API key (surrounding whitespace ignored); must not be readable by "
        "every user. Relative to this file's directory.",
    )
    # Not a real option: present only to refuse an inline key with an explanation instead of a
    # bare "unknown key". Excluded from the schema and from every dump.
    api_key: SkipJsonSchema[SecretStr | None] = Field(default=None, exclude=True)
    headers: dict[HeaderName, str] = Field(
        default_factory=dict, description="Extra HTTP headers (no credentials: use api_key_env)."
    )
    stream: bool = Field(default=False, description="Use server-sent-event streaming.")
    tool_mode: Literal["auto", "native", "json"] = Field(
        default="auto",
        description="`auto`: native tool calls, switching the run to JSON actions when the endpoint "
        "rejects tools, cannot parse its model's tool call, or the model writes its calls as text; "
        "`native`: the endpoint's tool calling only; `json`: JSON actions in text from the start.",
    )
    context_window: int = Field(
        default=128_000, ge=1024, description="Model context window in tokens (drives compaction)."
    )
    max_output_tokens: int | None = Field(default=None, ge=1, description="Cap on tokens per reply.")
    temperature: float | None = Field(
        default=None,
        ge=0,
        le=2,
        description="Sampling temperature sent with every request (0: the most likely token each time). "
        "Unset: none is sent and the server's default applies.",
    )
    request_timeout_s: Seconds = Field(
        default=_endpoint_default("request_timeout_s"), gt=0, description="One model request, at most."
    )
    read_idle_timeout_s: Seconds = Field(
        default=_endpoint_default("read_idle_timeout_s"),
        gt=0,
        description="Non-streaming: longest silence within a reply once it has begun.",
    )
    first_token_timeout_s: Seconds = Field(
        default=_endpoint_default("first_token_timeout_s"), gt=0, description="Streaming: first token."
    )
    stream_idle_timeout_s: Seconds = Field(
        default=_endpoint_default("stream_idle_timeout_s"),
        gt=0,
        description="Streaming: longest silence between chunks.",
    )
    images: bool = Field(
        default=False,
        description="The model accepts images: images from tool results and resources are sent (data "
        "URLs / image blocks, capped per result and per request) instead of only described.",
    )
    price: PriceSection | None = Field(
        default=None,
        description="USD per million tokens: `{ input = 3.00, output = 15.00, cached_input = 0.30 }`. "
        "Each request's cost is recorded; a cost budget needs it (docs/budgets.md).",
    )
    max_concurrent_requests: int | None = Field(
        default=None,
        ge=1,
        le=100_000,
        description="Provider limit for the whole daemon: model requests to this endpoint in flight at "
        "once, across every task (docs/budgets.md). Unset: no bound.",
    )
    requests_per_minute: int | None = Field(
        default=None,
        ge=1,
        le=1_000_000,
        description="Provider limit for the whole daemon: requests started in any minute (counted over "
        "62 s: a request reaches the provider after its grant).",
    )
    tokens_per_minute: int | None = Field(
        default=None,
        ge=1,
        description="Provider limit for the whole daemon: tokens (input estimate plus max output, "
        "corrected by the reply's usage) in any minute (counted over 62 s).",
    )
    script: ConfigPath | None = Field(
        default=None,
        description="kind scripted: the JSON script to play (docs/scripted-model.md). Default: the "
        "bundled notes-roundtrip script, which needs no MCP server.",
    )
    fallback: list[Name] = Field(
        default_factory=list,
        max_length=MAX_CHAIN - 1,
        description="Endpoints tried in order when this one is unavailable (not transitive).",
    )
    allow: list[str] | None = Field(
        default=None,
        max_length=256,
        description='Who may use this endpoint: "user:NAME", "user:UID", "group:NAME", "group:GID". '
        "Unset: every user who may connect. Admins always may.",
    )

    @field_validator("allow")
    @classmethod
    def _check_allow(cls, value: list[str] | None) -> list[str] | None:
        return _allow_entries(value)

    @field_validator("api_key")
    @classmethod
    def _refuse_inline_key(cls, value: SecretStr | None) -> SecretStr | None:
        if value is not None:
            raise ValueError(
                "an API key is never written in the config file (files get copied, backed up and shown "
                "by `agentd config show`); put it in an environment variable and set api_key_env, or in a "
                "file only the daemon can read and set api_key_file"
            )
        return value

    @property
    def limited(self) -> bool:
        """A provider limit is set: each request asks the daemon for a slot first."""
        return any(
            value is not None
            for value in (self.max_concurrent_requests, self.requests_per_minute, self.tokens_per_minute)
        )

    @property
    def effective_base_url(self) -> str | None:
        return self.base_url or DEFAULT_BASE_URLS.get(self.kind)

    @property
    def effective_script(self) -> str | None:
        """The script a scripted endpoint plays (`script`, else the bundled one); None otherwise."""
        if self.kind != "scripted":
            return None
        return self.script or str(EMBEDDED_SCRIPT)


class McpSection(Section):
    """One MCP server: a stdio command the subagent starts, or a streamable-HTTP (or legacy SSE) URL."""

    transport: Literal["stdio", "http", "sse"] | None = Field(
        default=None,
        description="Default: stdio when command is set, http when url is set. `sse`: the legacy "
        "HTTP+SSE transport (protocol 2024-11-05), for servers that offer only that.",
    )
    command: Command | None = Field(
        default=None,
        description="stdio: the program and its arguments, as a list or a string split like a shell "
        "would (no expansion, no shell).",
    )
    args: list[str] = Field(default_factory=list, description="stdio: arguments appended to command.")
    url: str | None = Field(
        default=None,
        max_length=2048,
        description="http: the streamable-HTTP endpoint; sse: the SSE endpoint (usually ending in /sse).",
    )
    env: dict[EnvName, str] = Field(
        default_factory=dict, description="stdio: environment variables with plain (non-secret) values."
    )
    env_from: dict[EnvName, EnvName] = Field(
        default_factory=dict,
        description="stdio: variable name → the daemon's environment variable holding its (secret) value.",
    )
    env_file: ConfigPath | None = Field(
        default=None,
        description="stdio: a KEY=VALUE file of secret variables; must not be readable by every user. "
        "Precedence: env_file, then env, then env_from.",
    )
    cwd: ConfigPath | None = Field(default=None, description="stdio: working directory of the server.")
    headers: dict[HeaderName, str] = Field(
        default_factory=dict, description="http: plain (non-secret) HTTP headers."
    )
    headers_from: dict[HeaderName, EnvName] = Field(
        default_factory=dict,
        description="http: header name → the daemon's environment variable holding its (secret) value.",
    )
    required: bool = Field(
        default=True, description="A task granted this server aborts (exit 6) when it cannot connect."
    )
    tools: list[str] | None = Field(
        default=None, description="Allow-list of tool names; unset grants every tool the server lists."
    )
    trust: list[TrustTag] | None = Field(
        default=None,
        description="Rule-of-Two tags: untrusted_input, sensitive, egress. Unset counts as "
        "untrusted_input; `[]` declares the server carries none.",
    )
    connect_timeout_s: Seconds = Field(
        default=_server_default("connect_timeout_s"), gt=0, description="Connect and initialize, at most."
    )
    call_timeout_s: Seconds = Field(
        default=_server_default("call_timeout_s"),
        gt=0,
        description="One tool call, at most (also clamped to the task's remaining time).",
    )
    oauth_client_id: str | None = Field(
        default=None,
        min_length=1,
        max_length=512,
        description="http, sse: OAuth client id for the client-credentials grant (a service's own "
        "credentials; no browser). Setting it turns OAuth on.",
    )
    oauth_method: Literal["client_secret_basic", "client_secret_post", "private_key_jwt"] | None = Field(
        default=None,
        description="How the client authenticates to the token endpoint. Default: private_key_jwt when "
        "oauth_private_key_file is set, else client_secret_basic.",
    )
    oauth_client_secret_env: EnvName | None = Field(
        default=None, description="The daemon's environment variable holding the OAuth client secret."
    )
    oauth_client_secret_file: ConfigPath | None = Field(
        default=None, description="File holding the OAuth client secret; must not be readable by every user."
    )
    oauth_private_key_file: ConfigPath | None = Field(
        default=None,
        description="PEM private key that signs the private_key_jwt assertion; must not be readable by "
        "every user.",
    )
    oauth_jwt_algorithm: str = Field(
        default="RS256", max_length=16, description="Signing algorithm of the assertion (RS256, ES256, …)."
    )
    oauth_scope: str | None = Field(
        default=None, max_length=2048, description="Scopes to request, space-separated."
    )
    oauth_issuer: str | None = Field(
        default=None,
        max_length=2048,
        description="The authorization server the credentials belong to (its issuer URL): tokens are then "
        "requested only from it, whatever the MCP server points to. Recommended.",
    )
    oauth_flow: Literal["client_credentials", "authorization_code"] | None = Field(
        default=None,
        description="http, sse: `authorization_code` uses the tokens an operator obtains once with "
        "`agentd mcp login NAME` (a person approves in a browser; tasks then refresh them unattended). "
        "Default: client_credentials when oauth_client_id is set.",
    )
    oauth_redirect_port: int | None = Field(
        default=None,
        ge=1,
        le=65535,
        description="authorization_code: the loopback port `agentd mcp login` receives the redirect on "
        "(http://127.0.0.1:PORT/callback). Unset: any free port; set it for a client pre-registered "
        "with a fixed redirect URI.",
    )
    log_level: McpLogLevel | None = Field(
        default=None,
        description="Ask the server for log messages at this level and above (`logging/setLevel`); "
        "they become `mcp.log` events. Unset: none is asked for.",
    )
    allow_rule_of_two_violation: bool = Field(
        default=False,
        description="Consent to grants that break the Rule of Two; a violating grant passes only when "
        "every server in it consents (or [security] allows all).",
    )
    approval: list[str] = Field(
        default_factory=list,
        max_length=MAX_PATTERNS,
        description="Tool names (shell-style globs: `delete_*`) whose calls wait for a person's approval "
        "(`agentd approve`/`deny`); a task can add to this list, never remove from it.",
    )
    allow: list[str] | None = Field(
        default=None,
        max_length=256,
        description='Who may grant this server to a task: "user:NAME", "user:UID", "group:NAME", '
        '"group:GID". Unset: every user who may connect. Admins always may.',
    )
    approval_by: Literal["owner", "admin"] = Field(
        default="owner",
        description="Who may approve this server's gated calls: `owner`, the task's owner (or an admin); "
        "`admin`, an admin only.",
    )
    approval_timeout: Duration = Field(
        default=_server_default("approval_timeout_s"),
        gt=0,
        description="How long one approval request waits for a decision; then the call is denied.",
    )

    idempotent: list[str] = Field(
        default_factory=list,
        max_length=MAX_PATTERNS,
        description="Tool names (shell-style globs: `get_*`) safe to run twice: a call of one that was "
        "running when its task was stopped runs again when the task resumes; any other call is "
        "reported to the model as interrupted, its outcome unknown (docs/durability.md).",
    )

    @field_validator("allow")
    @classmethod
    def _check_allow(cls, value: list[str] | None) -> list[str] | None:
        return _allow_entries(value)

    @field_validator("approval", "idempotent")
    @classmethod
    def _check_approval(cls, value: list[str]) -> list[str]:
        for pattern in value:
            problem = pattern_problem(pattern)
            if problem is not None:
                raise ValueError(problem)
        return value

    @property
    def effective_transport(self) -> Literal["stdio", "http", "sse"]:
        if self.transport is not None:
            return self.transport
        return "stdio" if self.command is not None else "http"

    @property
    def argv(self) -> list[str]:
        return [*(self.command or []), *self.args]

    @property
    def effective_trust(self) -> frozenset[str]:
        # Invariant: an untagged server is assumed to feed the model untrusted input (docs/design.md §14).
        return frozenset(("untrusted_input",) if self.trust is None else self.trust)


@dataclass(frozen=True, slots=True)
class McpServer:
    """A configured MCP server, from the TOML file or an imported mcpServers JSON file, with the
    source of every environment variable and header value (resolved only in `spec`)."""

    name: str
    section: McpSection
    # "toml", or "json:<path>" for an entry imported through mcp_servers_json.
    origin: str
    # Where its keys are reported: `mcp.<name>`, or `mcp_servers_json (<path>): mcpServers.<name>`.
    key: str
    env: Mapping[str, SecretSource]
    headers: Mapping[str, SecretSource]

    @classmethod
    def from_section(cls, name: str, section: McpSection) -> McpServer:
        """A server declared in TOML: plain `env`/`headers` values, `*_from` environment references."""
        key = f"mcp.{name}"

        def sources(plain: Mapping[str, str], refs: Mapping[str, str], field: str) -> dict[str, SecretSource]:
            found = {
                k: SecretSource("plain", where=f"{key}.{field}.{k}", value=SecretStr(v))
                for k, v in plain.items()
            }
            found.update(
                {k: SecretSource("env", v, where=f"{key}.{field}_from.{k}") for k, v in refs.items()}
            )
            return found

        return cls(
            name=name,
            section=section,
            origin="toml",
            key=key,
            env=sources(section.env, section.env_from, "env"),
            headers=sources(section.headers, section.headers_from, "headers"),
        )

    def _oauth_login(self, token_dir: Path | None) -> OAuthLoginSpec | None:
        section = self.section
        if section.oauth_flow != "authorization_code" or token_dir is None:
            return None
        return OAuthLoginSpec(
            token_file=str(token_file(token_dir, self.name)),
            client_id=section.oauth_client_id,
            scope=section.oauth_scope,
            redirect_port=section.oauth_redirect_port or 0,
        )

    def _oauth(self, environ: Mapping[str, str]) -> OAuthSpec | None:
        section, key = self.section, f"mcp.{self.name}"
        if section.oauth_client_id is None or section.oauth_flow == "authorization_code":
            return None
        secret = key_file = None
        if section.oauth_client_secret_env is not None:
            where = f"{key}.oauth_client_secret_env"
            secret = SecretSource("env", section.oauth_client_secret_env, where=where).read(environ)
        elif section.oauth_client_secret_file is not None:
            where = f"{key}.oauth_client_secret_file"
            secret = SecretSource("file", section.oauth_client_secret_file, where=where).read(environ)
        if section.oauth_private_key_file is not None:
            where = f"{key}.oauth_private_key_file"
            key_file = SecretSource("file", section.oauth_private_key_file, where=where).read(environ)
        method = section.oauth_method or (
            "private_key_jwt" if key_file is not None else "client_secret_basic"
        )
        return OAuthSpec(
            method=method,
            client_id=section.oauth_client_id,
            client_secret=secret,
            private_key=key_file,
            jwt_algorithm=section.oauth_jwt_algorithm,
            scope=section.oauth_scope,
            issuer=section.oauth_issuer,
        )

    def spec(self, environ: Mapping[str, str], *, token_dir: Path | None = None) -> McpServerSpec:
        """The grant sent to a subagent, secrets read now; `token_dir` holds `agentd mcp login`'s
        tokens (an `authorization_code` server without it gets no login). Raises
        `SecretUnavailable` (its `where` names the key)."""
        section = self.section
        env: dict[str, SecretStr] = {}
        if section.env_file is not None:
            env_file = SecretSource("env_file", section.env_file, where=f"mcp.{self.name}.env_file")
            env.update(env_file.read_all())
        env.update({k: source.read(environ) for k, source in self.env.items()})
        return McpServerSpec(
            oauth=self._oauth(environ),
            oauth_login=self._oauth_login(token_dir),
            name=self.name,
            transport=section.effective_transport,
            command=section.argv,
            env=env,
            cwd=section.cwd,
            url=section.url,
            headers={k: source.read(environ) for k, source in self.headers.items()},
            required=section.required,
            tools=section.tools,
            trust=sorted(section.effective_trust),
            connect_timeout_s=section.connect_timeout_s,
            call_timeout_s=section.call_timeout_s,
            log_level=section.log_level,
            approval=list(section.approval),
            approval_timeout_s=section.approval_timeout,
            idempotent=list(section.idempotent),
        )
