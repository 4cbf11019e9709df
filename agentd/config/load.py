"""The daemon's configuration: loading `agentd.toml` and resolving what a task may use.

`load_config` finds the file (see `agentd.config.paths`), validates its shape, imports an
mcpServers JSON file if one is named, checks every cross-key rule and — unless told not to —
that each secret and file it names is readable, and returns a frozen `Config` or raises one
`ConfigError` listing every problem. `Config` turns task requests into the spawn payload's
parts (`EndpointSpec` chains, `McpServerSpec`s, `Limits`, `LoopKnobs`), reading secrets at
call time. Import-light on purpose: `agentd config validate` must answer in milliseconds.
"""

from __future__ import annotations

import os
import tomllib
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from pydantic import SecretStr

from agentd.config import check as config_check
from agentd.config import paths as config_paths
from agentd.config.file import EMBEDDED_ENDPOINT, EMBEDDED_SCRIPT, AgentdFile
from agentd.config.mcpjson import import_mcp_json
from agentd.config.secrets import SecretSource, SecretUnavailable
from agentd.config.sections import (
    DaemonSection,
    DefaultsSection,
    LimitsSection,
    SecuritySection,
    SupervisionSection,
    TriggerSection,
)
from agentd.config.servers import TOKEN_DIR_NAME, IntelligenceSection, McpServer
from agentd.config.shape import validate_shape
from agentd.errors import ConfigError, ConfigProblem, NotConfigured
from protocol.spawn import EndpointSpec, Limits, LoopKnobs, McpServerSpec

if TYPE_CHECKING:
    # Only a type here; importing protocol.api would build its models on the validate fast path.
    from protocol.api import TaskSpec

__all__ = [
    "EMBEDDED_ENDPOINT",
    "EMBEDDED_SCRIPT",
    "Config",
    "ConfigError",
    "ConfigProblem",
    "Inspection",
    "NotConfigured",
    "inspect_config",
    "load_config",
]

EMBEDDED_SOURCE = "embedded defaults"
MAX_CONFIG_BYTES = 4 * 1024 * 1024


@dataclass(frozen=True, slots=True)
class Config:
    """A validated configuration. Sections are exposed as parsed (durations in seconds, sizes in
    bytes, paths absolute); the methods resolve names from a task into spawn-payload parts."""

    file: AgentdFile
    # Every MCP server: the [mcp.*] tables plus the entries imported from mcp_servers_json.
    mcp: Mapping[str, McpServer]
    socket: Path
    state_dir: Path
    # The file it came from, or EMBEDDED_SOURCE; `path` is what a reload (SIGHUP) re-reads.
    source: str
    path: Path | None
    notices: tuple[str, ...] = ()
    # Secrets are read from here at call time (os.environ unless a test passed its own).
    environ: Mapping[str, str] = field(default_factory=lambda: os.environ, repr=False)

    @property
    def daemon(self) -> DaemonSection:
        return self.file.daemon

    @property
    def defaults(self) -> DefaultsSection:
        return self.file.defaults

    @property
    def limits(self) -> LimitsSection:
        return self.file.limits

    @property
    def supervision(self) -> SupervisionSection:
        return self.file.supervision

    @property
    def security(self) -> SecuritySection:
        return self.file.security

    @property
    def intelligence(self) -> Mapping[str, IntelligenceSection]:
        return self.file.intelligence

    @property
    def triggers(self) -> list[TriggerSection]:
        return self.file.trigger

    @property
    def default_model(self) -> str:
        """The endpoint of tasks that name none: defaults.model, else the first declared."""
        return default_model(self.file)

    def _secret(self, source: SecretSource) -> SecretStr:
        try:
            return source.read(self.environ)
        except SecretUnavailable as exc:
            raise ConfigError(self.source, [ConfigProblem(exc.where, str(exc))]) from None

    def _endpoint(self, name: str) -> EndpointSpec:
        section = self.file.intelligence[name]
        key = f"intelligence.{name}"
        api_key = None
        if section.api_key_env is not None:
            api_key = self._secret(SecretSource("env", section.api_key_env, where=f"{key}.api_key_env"))
        elif section.api_key_file is not None:
            api_key = self._secret(SecretSource("file", section.api_key_file, where=f"{key}.api_key_file"))
        scripted = section.kind == "scripted"
        return EndpointSpec(
            name=name,
            kind=section.kind,
            base_url=None if scripted else section.effective_base_url,
            model=section.model,
            api_key=api_key,
            headers=dict(section.headers),
            script_path=section.effective_script,
            stream=section.stream,
            tool_mode=section.tool_mode,
            context_window=section.context_window,
            max_output_tokens=section.max_output_tokens,
            temperature=section.temperature,
            request_timeout_s=section.request_timeout_s,
            read_idle_timeout_s=section.read_idle_timeout_s,
            first_token_timeout_s=section.first_token_timeout_s,
            stream_idle_timeout_s=section.stream_idle_timeout_s,
            images=section.images,
            limited=section.limited,
        )

    def endpoint_chain(self, name: str | None) -> list[EndpointSpec]:
        """The endpoint `name` (None: the default) followed by its `fallback`s, keys read now.

        Raises:
            NotConfigured: no endpoint has that name.
            ConfigError: a key's variable or file cannot be read now.
        """
        chosen = self.default_model if name is None else name
        if chosen not in self.file.intelligence:
            raise NotConfigured("model", "intelligence endpoint", chosen, list(self.file.intelligence))
        return [self._endpoint(n) for n in (chosen, *self.file.intelligence[chosen].fallback)]

    def mcp_spec(self, name: str) -> McpServerSpec:
        """The MCP server `name` as granted to a subagent, secrets read now.

        Raises:
            NotConfigured: no server has that name.
            ConfigError: a secret's variable or file cannot be read now.
        """
        server = self.mcp.get(name)
        if server is None:
            raise NotConfigured("mcp", "MCP server", name, list(self.mcp))
        try:
            return server.spec(self.environ, token_dir=self.state_dir / TOKEN_DIR_NAME)
        except SecretUnavailable as exc:
            raise ConfigError(self.source, [ConfigProblem(exc.where, str(exc))]) from None

    def mcp_names_for(self, spec: TaskSpec) -> list[str]:
        """The servers a task asks for (its `mcp`, or defaults.mcp when it names none).

        Raises:
            NotConfigured: the task names a server the configuration lacks.
        """
        names = list(dict.fromkeys(spec.mcp or self.file.defaults.mcp))
        for index, name in enumerate(names):
            if name not in self.mcp:
                raise NotConfigured(f"mcp[{index}]", "MCP server", name, list(self.mcp))
        return names

    def rule_of_two_violation(self, server_names: Iterable[str]) -> str | None:
        """Why granting these servers together is refused (docs/design.md §14), or None when allowed."""
        allow_all = self.file.security.allow_rule_of_two_violation
        return config_check.rule_of_two_violation(self.mcp, server_names, allow_all)

    def limits_for(self, spec: TaskSpec) -> Limits:
        """The root grant of a task: its requested limits or the defaults, cut to the ceilings."""
        defaults = self.file.defaults
        asked = spec.limits
        steps = asked.max_steps if asked.max_steps is not None else defaults.max_steps
        tokens = asked.max_tokens if asked.max_tokens is not None else defaults.max_tokens
        deadline_s = asked.deadline_s if asked.deadline_s is not None else defaults.deadline_s
        return Limits(
            max_steps=min(steps, defaults.max_steps_ceiling),
            max_tokens=min(tokens, defaults.max_tokens_ceiling),
            deadline_s=min(deadline_s, defaults.deadline_ceiling_s),
            remaining_depth=defaults.max_depth,
            max_cost_usd=asked.max_cost if asked.max_cost is not None else defaults.max_cost,
        )

    def unpriced_problem(self, spec: TaskSpec) -> str | None:
        """Why a task with a cost budget cannot run: an endpoint of its chain has no price."""
        if self.limits_for(spec).max_cost_usd is None:
            return None
        chosen = spec.model or self.default_model
        for name in (chosen, *self.file.intelligence[chosen].fallback):
            if self.file.intelligence[name].price is None:
                return (
                    f"a cost budget needs a price on every endpoint of the task, but "
                    f"intelligence.{name}.price is not set (set it in the daemon's config, or drop "
                    "--max-cost / defaults.max_cost)"
                )
        return None

    def loop_knobs(self) -> LoopKnobs:
        """The loop knobs every task gets ([loop] over the loop's defaults)."""
        return LoopKnobs.model_validate(self.file.loop.model_dump())

    def trigger_grant(self, index: int) -> list[str]:
        """The MCP servers granted to tasks started by trigger `index`."""
        return config_check.trigger_grant(self.file, index)


def default_model(file: AgentdFile) -> str:
    """The endpoint of tasks that name none: defaults.model, else the first declared."""
    return file.defaults.model or next(iter(file.intelligence))


def merge_tables(base: Mapping[str, object], top: Mapping[str, object]) -> dict[str, object]:
    """`top` over `base`, recursively for tables; any other value in `top` replaces."""
    merged = dict(base)
    for key, value in top.items():
        below = merged.get(key)
        if isinstance(value, Mapping) and isinstance(below, Mapping):
            merged[key] = merge_tables(below, value)
        else:
            merged[key] = value
    return merged


def _read_toml(path: Path, required_by: str | None) -> dict[str, object]:
    source = str(path)
    try:
        with open(path, "rb") as handle:
            data = handle.read(MAX_CONFIG_BYTES + 1)
    except FileNotFoundError:
        named = f" (named by {required_by})" if required_by else ""
        raise ConfigError(source, [ConfigProblem("", f"{path} does not exist{named}")]) from None
    except OSError as exc:
        raise ConfigError(source, [ConfigProblem("", f"cannot read {path}: {exc.strerror}")]) from None
    if len(data) > MAX_CONFIG_BYTES:
        raise ConfigError(source, [ConfigProblem("", f"larger than {MAX_CONFIG_BYTES} bytes")])
    try:
        return tomllib.loads(data.decode("utf-8"))
    except UnicodeDecodeError as exc:
        raise ConfigError(source, [ConfigProblem("", f"not UTF-8 text (byte {exc.start})")]) from None
    except tomllib.TOMLDecodeError as exc:
        # tomllib's message ends with "(at line L, column C)" and never quotes the text.
        raise ConfigError(source, [ConfigProblem("", f"TOML syntax error: {exc}")]) from None


@dataclass(frozen=True, slots=True)
class Inspection:
    """What reading a configuration found: the file made of every valid part (None only when no
    part of it could be parsed), the MCP servers, every problem and the notices."""

    source: str
    path: Path | None
    file: AgentdFile | None
    servers: Mapping[str, McpServer]
    problems: list[ConfigProblem]
    notices: list[str]
    environ: Mapping[str, str]
    socket: Path
    state_dir: Path
    # The keys of the problems only this machine's environment showed (unset variables, files).
    environment_keys: frozenset[str] = frozenset()


def load_config(
    path: str | None = None,
    *,
    socket: str | None = None,
    state_dir: str | None = None,
    environ: Mapping[str, str] | None = None,
    check_environment: bool = True,
    overrides: Mapping[str, object] | None = None,
    refine: Callable[[AgentdFile], Mapping[str, object]] | None = None,
) -> Config:
    """Find, read and validate the configuration.

    Args:
        path: the `--config` argument; None follows the search order.
        socket: the `--socket` flag (beats $AGENTD_SOCKET and the file).
        state_dir: the `--state-dir` flag (beats $AGENTD_STATE_DIR and the file).
        environ: the environment to read (default `os.environ`, also read again at call time).
        check_environment: also check that every secret, script and directory named is usable
            (`agentd config show` turns this off to display a file meant for another environment).
        overrides: tables merged over the file before validation (`agentd run`'s flags), so
            flag values get exactly the checks and messages file values get.
        refine: more tables to merge, computed from the validated file (`agentd run`'s flags
            that apply to every endpoint the run may use, which only the file names); the
            result is validated again, and then checked once.

    Raises:
        ConfigError: every problem found, each naming its key.
    """
    found = inspect_config(
        path,
        socket=socket,
        state_dir=state_dir,
        environ=environ,
        check_environment=check_environment,
        overrides=overrides,
        refine=refine,
    )
    if found.problems or found.file is None:
        raise ConfigError(found.source, found.problems)
    return Config(
        file=found.file,
        mcp=found.servers,
        socket=found.socket,
        state_dir=found.state_dir,
        source=found.source,
        path=found.path,
        notices=tuple(found.notices),
        environ=found.environ,
    )


def inspect_config(
    path: str | None = None,
    *,
    socket: str | None = None,
    state_dir: str | None = None,
    environ: Mapping[str, str] | None = None,
    check_environment: bool = True,
    overrides: Mapping[str, object] | None = None,
    refine: Callable[[AgentdFile], Mapping[str, object]] | None = None,
) -> Inspection:
    """`load_config`'s reading and checking, every problem returned rather than raised: what is
    invalid is set aside (`agentd.config.shape`) and the rest still checked, so one run names
    every problem. Arguments as `load_config`.

    Raises:
        ConfigError: the file cannot be found or read, or is not TOML: nothing else can be checked.
    """
    env: Mapping[str, str] = os.environ if environ is None else environ
    located = config_paths.locate_config(path, env)
    if located.path is None:
        source, data, base_dir = EMBEDDED_SOURCE, {}, Path.cwd()
    else:
        source, base_dir = str(located.path), located.path.absolute().parent
        data = _read_toml(located.path, located.required_by)
    if overrides:
        data = merge_tables(data, overrides)
    shape = validate_shape(data, base_dir)
    if shape.file is not None and refine is not None and (more := refine(shape.file)):
        shape = validate_shape(merge_tables(_with_endpoints(data, shape.file), more), base_dir)
    problems = list(shape.problems)
    notices: list[str] = []
    file = shape.file
    servers: dict[str, McpServer] = {}
    environment: list[ConfigProblem] = []
    if file is not None:
        servers = {name: McpServer.from_section(name, section) for name, section in file.mcp.items()}
        checked = [
            ConfigProblem(shape.original_key(p.key), p.message, about=p.about)
            for p in _check(file, servers, notices)
        ]
        problems += [p for p in checked if not shape.explains(p)]
        if check_environment:
            environment = config_check.check_environment(file, servers, env)
            problems += environment
    configured_socket = file.daemon.socket if file is not None else None
    socket_at = config_paths.socket_path(env, configured_socket, socket)
    if len(os.fsencode(socket_at)) > config_paths.MAX_SOCKET_PATH_BYTES:
        problems.append(
            ConfigProblem(
                "daemon.socket",
                f"{socket_at} is longer than the {config_paths.MAX_SOCKET_PATH_BYTES} bytes a unix socket "
                "path may hold",
            )
        )
    listen = file.metrics.listen if file is not None else None
    if listen is not None and listen.startswith("/") and os.path.normpath(listen) == str(socket_at):
        problems.append(
            ConfigProblem("metrics.listen", "is the API socket; metrics need an address of their own")
        )
    return Inspection(
        source=source,
        path=located.path,
        file=file,
        servers=servers,
        problems=problems,
        notices=notices,
        environ=env,
        socket=socket_at,
        state_dir=config_paths.state_dir(env, file.daemon.state_dir if file is not None else None, state_dir),
        environment_keys=frozenset(p.key for p in environment),
    )


def _with_endpoints(data: Mapping[str, object], file: AgentdFile) -> Mapping[str, object]:
    """`data` with the endpoints `file` has, so a refinement of an embedded endpoint (which the
    data does not spell out) merges over the whole endpoint rather than starting a table."""
    if "intelligence" in data:
        return data
    endpoints = {name: s.model_dump(mode="json", exclude_unset=True) for name, s in file.intelligence.items()}
    return {**data, "intelligence": endpoints}


def _check(file: AgentdFile, servers: dict[str, McpServer], notices: list[str]) -> list[ConfigProblem]:
    """The cross-key checks, after importing mcp_servers_json into `servers`; notices are appended
    to `notices`."""
    problems: list[ConfigProblem] = []
    if file.mcp_servers_json is not None:
        imported, json_problems, json_notices = import_mcp_json(Path(file.mcp_servers_json))
        problems += json_problems
        notices += json_notices
        for name, server in imported.items():
            if name in servers:
                notices.append(
                    f"mcp_servers_json: server {name!r} is also an [mcp.{name}] table; the table wins"
                )
            else:
                servers[name] = server
    found, check_notices = config_check.check_file(file, servers)
    problems += found
    notices += check_notices
    return problems
