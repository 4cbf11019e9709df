"""Rules that span keys, tables or files, checked after the shape is valid.

Pure functions over the parsed file and the merged MCP servers: they return every problem (keyed
by its dotted path) rather than stopping at the first, plus notices that do not block loading.
`check_environment` is the one effectful pass: it reads secrets and looks for files, so
`agentd config validate` fails on a key the daemon could not read.
"""

from __future__ import annotations

import grp
import importlib.util
import os
import string
from collections.abc import Iterable, Mapping
from urllib.parse import urlsplit

from pydantic import TypeAdapter, ValidationError

from agentd.config.cron import cron_problem, zone_problem
from agentd.config.file import AgentdFile
from agentd.config.redact import argv_credentials, url_credentials
from agentd.config.secrets import SecretSource, SecretUnavailable
from agentd.config.sections import TriggerSection
from agentd.config.servers import (
    CREDENTIAL_HEADERS,
    LIMIT_KEYS,
    MAX_CHAIN,
    IntelligenceSection,
    McpSection,
    McpServer,
)
from agentd.errors import ConfigProblem
from protocol.approval import gated
from protocol.spawn import Name

# Threaded Python reserves address space it never touches; below this it cannot start threads.
MIN_ADDRESS_SPACE_BYTES = 1 << 30
# systemd stops a service after TimeoutStopSec (DefaultTimeoutStopSec=90s); a drain must end first.
SYSTEMD_STOP_TIMEOUT_S = 90.0
TEMPLATE_FIELDS = frozenset({"uri", "server", "etag"})
TRUST_TAGS = ("untrusted_input", "sensitive", "egress")
_LOOPBACK_HOSTS = frozenset({"localhost", "127.0.0.1", "::1"})
_NAME = TypeAdapter(Name)


def available(names: Iterable[str]) -> str:
    listed = ", ".join(names)
    return f"available: {listed}" if listed else "none are configured"


def no_such(key: str, table: str, name: str, known: Iterable[str]) -> ConfigProblem:
    """`key` names an entry of `table` (`intelligence`, `mcp`) that the configuration lacks."""
    what = "endpoint" if table == "intelligence" else "MCP server"
    return ConfigProblem(key, f"no {what} named {name!r} ({available(known)})", about=f"{table}.{name}")


def rule_of_two_violation(
    servers: Mapping[str, McpServer],
    names: Iterable[str],
    allow_all: bool,
    *,
    untrusted_from: str | None = None,
) -> str | None:
    """Why granting `names` together breaks the Rule of Two (docs/design.md §14), or None when it does not
    (or the operator allowed it). Unknown names are ignored: resolve them first. `untrusted_from`:
    untrusted input the task gets other than from a server (a trigger's URI, in its instruction)."""
    granted = [servers[n] for n in dict.fromkeys(names) if n in servers]
    carriers = {tag: [s.name for s in granted if tag in s.section.effective_trust] for tag in TRUST_TAGS}
    if untrusted_from is not None:
        carriers["untrusted_input"].append(untrusted_from)
    if not all(carriers.values()) or allow_all:
        return None
    refusing = [s.name for s in granted if not s.section.allow_rule_of_two_violation]
    if not refusing:
        return None
    parts = ", ".join(f"{tag} ({', '.join(carriers[tag])})" for tag in TRUST_TAGS)
    return (
        f"granting {', '.join(s.name for s in granted)} together combines {parts}: the Rule of Two "
        "refuses tools that together read untrusted input, reach sensitive data and can send data out "
        "(untagged servers count as untrusted_input). Narrow the grant, correct the servers' trust tags, "
        f"or set allow_rule_of_two_violation = true on {', '.join(refusing)}"
    )


OAUTH_KEYS = (
    "oauth_client_id",
    "oauth_method",
    "oauth_client_secret_env",
    "oauth_client_secret_file",
    "oauth_private_key_file",
    "oauth_scope",
    "oauth_issuer",
    "oauth_flow",
    "oauth_redirect_port",
)
# Keys of the client-credentials grant; an authorization-code login is a public client (PKCE).
CLIENT_CREDENTIAL_KEYS = (
    "oauth_method",
    "oauth_client_secret_env",
    "oauth_client_secret_file",
    "oauth_private_key_file",
    "oauth_issuer",
)


def _check_oauth(key: str, section: McpSection, out: list[ConfigProblem]) -> None:
    """OAuth keys make sense together: a client id, and the one credential its method uses."""
    given = [k for k in OAUTH_KEYS if getattr(section, k) is not None]
    if not given:
        return
    if section.oauth_flow == "authorization_code":
        for field in CLIENT_CREDENTIAL_KEYS:
            if getattr(section, field) is not None:
                out.append(
                    ConfigProblem(
                        f"{key}.{field}",
                        "applies to the client_credentials flow only; an authorization_code login is a "
                        "public client (PKCE, `agentd mcp login`)",
                    )
                )
        return
    if section.oauth_redirect_port is not None:
        out.append(
            ConfigProblem(f"{key}.oauth_redirect_port", 'applies to oauth_flow = "authorization_code" only')
        )
    if section.oauth_client_id is None:
        out.append(ConfigProblem(f"{key}.{given[0]}", "needs oauth_client_id"))
        return
    secrets = [k for k in ("oauth_client_secret_env", "oauth_client_secret_file") if getattr(section, k)]
    if len(secrets) > 1:
        out.append(
            ConfigProblem(f"{key}.oauth_client_secret_file", "also set oauth_client_secret_env; keep one")
        )
    jwt = section.oauth_method == "private_key_jwt" or (
        section.oauth_method is None and section.oauth_private_key_file is not None
    )
    if jwt and section.oauth_private_key_file is None:
        out.append(
            ConfigProblem(f"{key}.oauth_private_key_file", "required for oauth_method private_key_jwt")
        )
    if not jwt and not secrets:
        out.append(
            ConfigProblem(
                f"{key}.oauth_client_secret_env",
                "a client secret is required (oauth_client_secret_env or oauth_client_secret_file); or set "
                "oauth_private_key_file for private_key_jwt",
            )
        )
    if section.oauth_issuer is not None and urlsplit(section.oauth_issuer).scheme not in ("http", "https"):
        out.append(
            ConfigProblem(f"{key}.oauth_issuer", "must be the authorization server's http(s) issuer URL")
        )


def _check_url(
    key: str, url: str | None, problems: list[ConfigProblem], notices: list[str], *, hint: str
) -> None:
    if url is None:
        return
    parts = urlsplit(url)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        problems.append(ConfigProblem(key, "must be an http:// or https:// URL with a host"))
    elif parts.scheme == "http" and parts.hostname not in _LOOPBACK_HOSTS:
        notices.append(
            f"{key}: plain http to a non-loopback host; credentials and content travel unencrypted"
        )
    found = url_credentials(url)
    if found:
        notices.append(
            f"{key}: carries what looks like a credential ({', '.join(found)}); it is masked in "
            f"`config show`, but credentials belong in {hint}"
        )


def _check_headers(key: str, headers: Iterable[str], problems: list[ConfigProblem], hint: str) -> None:
    for name in headers:
        if name.lower() in CREDENTIAL_HEADERS:
            problems.append(
                ConfigProblem(f"{key}.{name}", f"carries a credential; never write it inline: {hint}")
            )


def _check_endpoint(
    name: str, section: IntelligenceSection, file: AgentdFile, out: list[ConfigProblem], notices: list[str]
) -> None:
    key = f"intelligence.{name}"
    fields = section.model_fields_set
    if section.kind == "scripted":
        unused_keys = ("base_url", "api_key_env", "api_key_file", "headers", "stream", *LIMIT_KEYS)
        for unused in unused_keys:
            if unused in fields:
                out.append(ConfigProblem(f"{key}.{unused}", "not used by kind scripted; remove it"))
    else:
        if section.script is not None:
            out.append(
                ConfigProblem(f"{key}.script", f"only kind scripted plays a script, not {section.kind}")
            )
        if not section.model:
            out.append(
                ConfigProblem(f"{key}.model", f"required for kind {section.kind} (the model to ask for)")
            )
        _check_url(
            f"{key}.base_url", section.effective_base_url, out, notices, hint="api_key_env or api_key_file"
        )
    if section.api_key_env is not None and section.api_key_file is not None:
        out.append(ConfigProblem(f"{key}.api_key_file", "set either api_key_env or api_key_file, not both"))
    _check_headers(f"{key}.headers", section.headers, out, "use api_key_env or api_key_file")
    if section.max_output_tokens is not None and section.max_output_tokens >= section.context_window:
        out.append(ConfigProblem(f"{key}.max_output_tokens", "must be smaller than context_window"))
    seen: set[str] = set()
    for index, other in enumerate(section.fallback):
        where = f"{key}.fallback[{index}]"
        if other == name or other in seen:
            out.append(ConfigProblem(where, f"{other!r} is already in this chain"))
        elif other not in file.intelligence:
            out.append(no_such(where, "intelligence", other, file.intelligence))
        elif (mode := file.intelligence[other].tool_mode) != section.tool_mode:
            out.append(
                ConfigProblem(
                    where,
                    f"{other!r} uses tool_mode {mode} but {name!r} uses {section.tool_mode}; every endpoint "
                    "of a chain must share tool_mode (the transcript's tool-call format depends on it)",
                )
            )
        seen.add(other)
    if len(section.fallback) + 1 > MAX_CHAIN:
        out.append(ConfigProblem(f"{key}.fallback", f"a chain holds at most {MAX_CHAIN} endpoints"))


def _check_server(server: McpServer, out: list[ConfigProblem], notices: list[str]) -> None:
    key = server.key
    section = server.section
    try:
        _NAME.validate_python(server.name)
    except ValidationError:
        out.append(ConfigProblem(key, "server names use letters, digits, '_', '.', '-' (at most 64)"))
    if section.command is not None and section.url is not None:
        out.append(ConfigProblem(f"{key}.url", "a server has either command (stdio) or url (http), not both"))
        return
    transport = section.effective_transport
    if transport == "stdio" and not section.argv:
        out.append(ConfigProblem(f"{key}.command", "required for a stdio server (the program to start)"))
    if transport != "stdio" and section.url is None:
        need = f"required for an {transport} server (or set command for stdio)"
        out.append(ConfigProblem(f"{key}.url", need))
    _check_url(f"{key}.url", section.url, out, notices, hint="headers_from")
    flags = argv_credentials(section.argv)
    if flags:
        notices.append(
            f"{key}.command: passes what looks like a credential on the command line "
            f"({', '.join(flags)}); any local user can read it in `ps`: use env_from instead"
        )
    stdio_only = ("command", "args", "env", "env_from", "env_file", "cwd")
    http_only = ("headers", "headers_from", *OAUTH_KEYS)
    _check_oauth(key, section, out)
    other = "http and sse" if transport == "stdio" else "stdio"
    for field in http_only if transport == "stdio" else stdio_only:
        if field in section.model_fields_set and getattr(section, field):
            out.append(
                ConfigProblem(f"{key}.{field}", f"applies to {other} servers only; this one is {transport}")
            )
    for name in set(section.env) & set(section.env_from):
        out.append(ConfigProblem(f"{key}.env_from.{name}", "also set in env; keep one"))
    for name in set(section.headers) & set(section.headers_from):
        out.append(ConfigProblem(f"{key}.headers_from.{name}", "also set in headers; keep one"))
    _check_headers(f"{key}.headers", section.headers, out, "use headers_from")
    tools = section.tools
    if tools is not None and (any(not t for t in tools) or len(set(tools)) != len(tools)):
        out.append(ConfigProblem(f"{key}.tools", "tool names must be non-empty and listed once"))
    if tools is not None:
        out.extend(gate_problems(key, section.approval, tools, "this server grants (its `tools`)"))


def unmatched_gates(patterns: Iterable[str], tools: Iterable[str]) -> list[tuple[int, str]]:
    """The approval patterns (with their index) that match none of `tools`. A gate that matches
    nothing is almost surely a typo, and gates nothing; a catch-all (`*`) always matches."""
    names = list(tools)
    return [
        (index, pattern)
        for index, pattern in enumerate(patterns)
        if not gated([pattern], "") and not any(gated([pattern], t) for t in names)
    ]


def gate_problems(key: str, patterns: Iterable[str], tools: Iterable[str], whose: str) -> list[ConfigProblem]:
    """A problem for each of `key`'s approval patterns that matches none of `tools`."""
    listed = ", ".join(sorted(tools)) or "none"
    return [
        ConfigProblem(
            f"{key}.approval[{index}]",
            f"{pattern!r} matches none of the tools {whose}: {listed}; it would gate nothing: correct "
            "the pattern or remove it",
        )
        for index, pattern in unmatched_gates(patterns, tools)
    ]


def gates_to_probe(servers: Mapping[str, McpServer]) -> list[str]:
    """The servers whose approval patterns can only be checked against the tools they list: some
    pattern that is not a catch-all, and no `tools` allow-list to check it against."""
    return [
        name
        for name, server in servers.items()
        if server.section.tools is None and any(not gated([p], "") for p in server.section.approval)
    ]


def _check_servers(key: str, names: Iterable[str], known: Mapping[str, object]) -> list[ConfigProblem]:
    return [no_such(f"{key}[{i}]", "mcp", n, known) for i, n in enumerate(names) if n not in known]


def trigger_grant(file: AgentdFile, index: int) -> list[str]:
    """The MCP servers a task started by trigger `index` is granted: its `mcp` (or defaults.mcp)
    plus the watched server, whose resource the task must read."""
    trigger = file.trigger[index]
    names = trigger.mcp if trigger.mcp is not None else file.defaults.mcp
    return list(dict.fromkeys([*names, trigger.server]))


def _template_problem(template: str) -> str | None:
    try:
        fields = [field for _, field, _, _ in string.Formatter().parse(template) if field is not None]
    except ValueError as exc:
        return f"is not a valid template ({exc}); write {{{{ and }}}} for literal braces"
    for field in fields:
        if field not in TEMPLATE_FIELDS:
            return f"uses {{{field}}}; the fields are {{uri}}, {{server}} and {{etag}}"
    return None


WARM_KEYS = (
    "turn_max_steps",
    "turn_max_tokens",
    "turn_deadline",
    "session_max_tokens",
    "session_idle_timeout",
    "session_max_life",
)


def _check_warm_keys(key: str, trigger: TriggerSection) -> list[ConfigProblem]:
    """The warm-session keys: route "continue" only, and a turn fits in its session."""
    if trigger.route != "continue":
        return [
            ConfigProblem(f"{key}.{name}", 'applies to route "continue" only (a warm session)')
            for name in WARM_KEYS
            if name in trigger.model_fields_set
        ]
    out: list[ConfigProblem] = []
    if trigger.turn_max_tokens > trigger.session_max_tokens:
        out.append(ConfigProblem(f"{key}.turn_max_tokens", "must be at most session_max_tokens"))
    if trigger.turn_deadline > trigger.session_max_life:
        out.append(ConfigProblem(f"{key}.turn_deadline", "must be at most session_max_life"))
    return out


def _check_triggers(
    file: AgentdFile, servers: Mapping[str, McpServer], allow_all: bool, out: list[ConfigProblem]
) -> None:
    names: set[str] = set()
    targets: set[tuple[str, str | None, str | None]] = set()
    for index, trigger in enumerate(file.trigger):
        key = f"trigger[{index}]"
        name = trigger.name or f"trigger-{index}"
        if name in names:
            out.append(ConfigProblem(f"{key}.name", f"another trigger is already named {name!r}"))
        names.add(name)
        if trigger.server not in servers:
            out.append(no_such(f"{key}.server", "mcp", trigger.server, servers))
        if (trigger.uri is None) == (trigger.glob is None):
            out.append(ConfigProblem(key, "set exactly one of uri (an exact URI) or glob (a pattern)"))
        target = (trigger.server, trigger.uri, trigger.glob)
        if target in targets:
            which = "uri" if trigger.uri is not None else "glob"
            out.append(
                ConfigProblem(
                    f"{key}.{which}", "an earlier trigger already watches this; it would never fire"
                )
            )
        targets.add(target)
        if trigger.model is not None and trigger.model not in file.intelligence:
            out.append(no_such(f"{key}.model", "intelligence", trigger.model, file.intelligence))
        out.extend(_check_servers(f"{key}.mcp", trigger.mcp or [], servers))
        for spawn_only in ("max_inflight", "daily_cost"):
            if trigger.route == "continue" and spawn_only in trigger.model_fields_set:
                out.append(
                    ConfigProblem(
                        f"{key}.{spawn_only}", 'applies to route "spawn" only (continue has one session)'
                    )
                )
        out.extend(_check_warm_keys(key, trigger))
        if trigger.max_wait_ms < trigger.debounce_ms:
            out.append(ConfigProblem(f"{key}.max_wait_ms", "must be at least debounce_ms"))
        if problem := _template_problem(trigger.instruction):
            out.append(ConfigProblem(f"{key}.instruction", problem))
        # A delivery's URI (and etag) is the watched server's text in the task's instruction:
        # untrusted input, however the servers are tagged.
        untrusted = f"the URI in {key}'s instruction"
        if why := rule_of_two_violation(
            servers, trigger_grant(file, index), allow_all, untrusted_from=untrusted
        ):
            out.append(ConfigProblem(f"{key}.mcp", why))


def _check_schedules(
    file: AgentdFile, servers: Mapping[str, McpServer], allow_all: bool, out: list[ConfigProblem]
) -> None:
    names: set[str] = set()
    for index, schedule in enumerate(file.schedule):
        key = f"schedule[{index}]"
        if schedule.name in names:
            out.append(ConfigProblem(f"{key}.name", f"another schedule is already named {schedule.name!r}"))
        names.add(schedule.name)
        kinds = [
            k for k, on in (("cron", schedule.cron), ("every", schedule.every), ("loop", schedule.loop)) if on
        ]
        if len(kinds) != 1:
            out.append(ConfigProblem(key, "set exactly one of cron, every or loop = true"))
        if schedule.cron is not None and (problem := cron_problem(schedule.cron)):
            out.append(ConfigProblem(f"{key}.cron", problem))
        if schedule.tz is not None:
            if schedule.cron is None:
                out.append(ConfigProblem(f"{key}.tz", "applies only with cron"))
            elif problem := zone_problem(schedule.tz):
                out.append(ConfigProblem(f"{key}.tz", problem))
        if not schedule.loop:
            for loop_only in ("interval", "idle_backoff_max"):
                if loop_only in schedule.model_fields_set:
                    out.append(ConfigProblem(f"{key}.{loop_only}", "applies only with loop = true"))
        if schedule.model is not None and schedule.model not in file.intelligence:
            out.append(no_such(f"{key}.model", "intelligence", schedule.model, file.intelligence))
        out.extend(_check_servers(f"{key}.mcp", schedule.mcp or [], servers))
        grant = list(dict.fromkeys(schedule.mcp if schedule.mcp is not None else file.defaults.mcp))
        if why := rule_of_two_violation(servers, grant, allow_all):
            out.append(ConfigProblem(f"{key}.mcp", why))


def check_file(file: AgentdFile, servers: Mapping[str, McpServer]) -> tuple[list[ConfigProblem], list[str]]:
    """Every cross-key problem of `file` with its merged MCP `servers`, and non-blocking notices."""
    out: list[ConfigProblem] = []
    notices: list[str] = []
    for name, section in file.intelligence.items():
        _check_endpoint(name, section, file, out, notices)
    for server in servers.values():
        _check_server(server, out, notices)
    defaults = file.defaults
    if defaults.model is not None and defaults.model not in file.intelligence:
        out.append(no_such("defaults.model", "intelligence", defaults.model, file.intelligence))
    out.extend(_check_servers("defaults.mcp", defaults.mcp, servers))
    allow_all = file.security.allow_rule_of_two_violation
    if why := rule_of_two_violation(servers, defaults.mcp, allow_all):
        out.append(ConfigProblem("defaults.mcp", why))
    for value, ceiling, field in (
        (defaults.max_steps, defaults.max_steps_ceiling, "max_steps"),
        (defaults.max_tokens, defaults.max_tokens_ceiling, "max_tokens"),
        (defaults.deadline_s, defaults.deadline_ceiling_s, "deadline"),
    ):
        if value > ceiling:
            out.append(ConfigProblem(f"defaults.{field}", f"is above defaults.{field}_ceiling"))
    sup = file.supervision
    ladder_s = sup.cancel_grace_s + sup.term_grace_s + sup.kill_reap_s
    drain_s = file.daemon.drain_timeout_s
    if drain_s >= SYSTEMD_STOP_TIMEOUT_S:
        out.append(
            ConfigProblem(
                "daemon.drain_timeout_s",
                f"must be below {SYSTEMD_STOP_TIMEOUT_S:g} s, systemd's default TimeoutStopSec: systemd "
                "kills the daemon when that expires, mid-drain (raise TimeoutStopSec in the unit as well "
                "if you need more, and keep this below it)",
            )
        )
    elif drain_s < ladder_s:
        out.append(
            ConfigProblem(
                "daemon.drain_timeout_s",
                f"is shorter than the kill ladder (supervision cancel_grace_s + term_grace_s + kill_reap_s "
                f"= {ladder_s:g} s), so a drain could not finish stopping a child",
            )
        )
    if file.daemon.max_connections_per_uid > file.daemon.max_connections:
        out.append(
            ConfigProblem(
                "daemon.max_connections_per_uid",
                f"must not exceed daemon.max_connections ({file.daemon.max_connections})",
            )
        )
    address_space = file.limits.address_space_bytes
    if address_space is not None and address_space < MIN_ADDRESS_SPACE_BYTES:
        out.append(
            ConfigProblem(
                "limits.address_space",
                "must be at least 1G: threaded Python cannot start threads under a tight RLIMIT_AS; "
                "bound real memory with memory_max",
            )
        )
    if sup.loop_stall_s <= sup.ping_interval_s:
        out.append(ConfigProblem("supervision.loop_stall_s", "must be longer than ping_interval_s"))
    if file.loop.backoff_initial_s > file.loop.backoff_max_s:
        out.append(ConfigProblem("loop.backoff_initial_s", "must not exceed backoff_max_s"))
    _check_triggers(file, servers, allow_all, out)
    _check_schedules(file, servers, allow_all, out)
    return out, notices


def _read(source: SecretSource, environ: Mapping[str, str], out: list[ConfigProblem]) -> None:
    try:
        source.read(environ)
    except SecretUnavailable as exc:
        out.append(ConfigProblem(exc.where, str(exc)))


def check_environment(
    file: AgentdFile, servers: Mapping[str, McpServer], environ: Mapping[str, str]
) -> list[ConfigProblem]:
    """Problems only the running machine can show: unset variables, unreadable or world-readable
    key files, missing scripts and directories, an unknown admin group."""
    out: list[ConfigProblem] = []
    for name, section in file.intelligence.items():
        key = f"intelligence.{name}"
        if section.api_key_env is not None:
            _read(SecretSource("env", section.api_key_env, where=f"{key}.api_key_env"), environ, out)
        if section.api_key_file is not None:
            _read(SecretSource("file", section.api_key_file, where=f"{key}.api_key_file"), environ, out)
        script = section.effective_script
        if script is not None and not os.path.isfile(script):
            out.append(ConfigProblem(f"{key}.script", f"{script} is not a readable file"))
    for server in servers.values():
        for source in (*server.env.values(), *server.headers.values()):
            _read(source, environ, out)
        env_file, cwd = server.section.env_file, server.section.cwd
        if env_file is not None:
            try:
                SecretSource("env_file", env_file, where=f"{server.key}.env_file").read_all()
            except SecretUnavailable as exc:
                out.append(ConfigProblem(exc.where, str(exc)))
        if cwd is not None and not os.path.isdir(cwd):
            out.append(ConfigProblem(f"{server.key}.cwd", f"{cwd} is not a directory"))
    for key, group in (("admin_group", file.daemon.admin_group), ("socket_group", file.daemon.socket_group)):
        if group is None:
            continue
        try:
            grp.getgrgid(int(group)) if group.isdigit() else grp.getgrnam(group)
        except KeyError:
            out.append(ConfigProblem(f"daemon.{key}", f"no group {group!r} on this machine"))
    metrics = file.metrics
    wants_metrics = metrics.listen is not None or metrics.textfile is not None
    if wants_metrics and importlib.util.find_spec("prometheus_client") is None:
        key = "metrics.listen" if metrics.listen is not None else "metrics.textfile"
        out.append(ConfigProblem(key, "needs prometheus-client: install agentd[metrics]"))
    if metrics.textfile is not None and not os.path.isdir(folder := os.path.dirname(metrics.textfile)):
        out.append(ConfigProblem("metrics.textfile", f"{folder} is not a directory"))
    if file.executor.kind == "temporal" and importlib.util.find_spec("temporalio") is None:
        out.append(
            ConfigProblem("executor.kind", "temporal needs the temporalio SDK: install agentd[temporal]")
        )
    return out
