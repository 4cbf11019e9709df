"""`agentd config validate|schema|show`: plain functions the CLI calls, each writing to the
streams it is given and returning the process exit code (0 ok, 2 invalid configuration).

`show` prints the effective configuration as JSON — defaults filled in, paths absolute, imported
MCP servers merged — with every secret replaced by `***` and where it comes from, and every
credential written inline (a URL's userinfo or query values, a credential-looking argument) masked.
"""

from __future__ import annotations

import json
from typing import TextIO

from pydantic import JsonValue

from agentd.cli.gate_check import check_gates
from agentd.config.file import AgentdFile
from agentd.config.load import Config, inspect_config, load_config
from agentd.config.redact import redact_argv, redact_url
from agentd.config.secrets import MASK, SecretSource
from agentd.config.servers import McpServer
from agentd.errors import ConfigError
from protocol.exit_codes import ExitCode


def _report(exc: ConfigError, err: TextIO) -> int:
    err.write(f"agentd: invalid configuration ({exc.source}):\n")
    for problem in exc.problems:
        err.write(f"  {problem}\n")
    return ExitCode.USAGE


def _notices(config: Config, err: TextIO) -> None:
    for notice in config.notices:
        err.write(f"note: {notice}\n")


def cmd_validate(path: str | None, out: TextIO, err: TextIO, *, check_environment: bool = True) -> int:
    """Validate the configuration (`path`, else the search order) and report every problem at once:
    the file's shape and cross-key rules, approval gates against the tools their servers list, and
    — unless `check_environment` is off (`--no-env`) — every secret, file and group it names."""
    try:
        found = inspect_config(path, check_environment=check_environment)
    except ConfigError as exc:  # not found, unreadable, or not TOML: nothing more to check
        return _report(exc, err)
    problems, notes = list(found.problems), list(found.notices)
    if found.file is not None:
        gates, gate_notes = check_gates(found, connect=check_environment)
        problems += gates
        notes += gate_notes
    if problems:
        _report(ConfigError(found.source, problems), err)
    for note in notes:
        err.write(f"note: {note}\n")
    if problems:
        if check_environment and any(p.key in found.environment_keys for p in problems):
            err.write(
                "hint: the environment problems are about this shell's environment; "
                "`agentd config validate --no-env` checks the file alone\n"
            )
        return ExitCode.USAGE
    assert found.file is not None
    out.write(
        f"ok: {found.source} ({len(found.file.intelligence)} endpoint(s), {len(found.servers)} MCP "
        f"server(s), {len(found.file.trigger)} trigger(s))"
        + ("; environment not checked (--no-env)" if not check_environment else "")
        + "\n"
    )
    return ExitCode.OK


def cmd_schema(out: TextIO) -> int:
    """Print the JSON Schema of agentd.toml."""
    schema = AgentdFile.model_json_schema(by_alias=True)
    schema = {"$schema": "https://json-schema.org/draft/2020-12/schema", **schema, "title": "agentd.toml"}
    out.write(json.dumps(schema, indent=2) + "\n")
    return ExitCode.OK


def _masked(source: SecretSource) -> str:
    if source.kind == "plain" and source.value is not None:
        return source.value.get_secret_value()
    return f"{MASK} ({source.describe()})"


def _server(server: McpServer) -> dict[str, JsonValue]:
    section = server.section
    shown = section.model_dump(mode="json", exclude={"env_from", "headers_from", "command", "args"})
    if section.url is not None:
        shown["url"] = redact_url(section.url)
    shown.update(
        origin=server.origin,
        transport=section.effective_transport,
        command=redact_argv(section.argv),
        env={k: _masked(v) for k, v in server.env.items()},
        headers={k: _masked(v) for k, v in server.headers.items()},
        trust=sorted(section.effective_trust),
    )
    return shown


def effective(config: Config) -> dict[str, JsonValue]:
    """The effective configuration as JSON data, secrets masked."""
    data = config.file.model_dump(mode="json", exclude={"intelligence", "mcp"})
    data["daemon"].update(socket=str(config.socket), state_dir=str(config.state_dir))
    data["defaults"]["model"] = config.default_model
    endpoints: dict[str, JsonValue] = {}
    for name, section in config.intelligence.items():
        shown = section.model_dump(mode="json", exclude={"api_key_env", "api_key_file"})
        base_url = section.effective_base_url if section.kind != "scripted" else None
        shown["base_url"] = redact_url(base_url) if base_url is not None else None
        shown["script"] = section.effective_script
        if section.api_key_env is not None:
            shown["api_key"] = f"{MASK} (env:{section.api_key_env})"
        elif section.api_key_file is not None:
            shown["api_key"] = f"{MASK} (file:{section.api_key_file})"
        endpoints[name] = shown
    return {
        "source": config.source,
        "notices": list(config.notices),
        **data,
        "intelligence": endpoints,
        "mcp": {name: _server(server) for name, server in config.mcp.items()},
    }


def cmd_show(path: str | None, out: TextIO, err: TextIO) -> int:
    """Print the effective configuration as JSON with secrets masked. Secrets are not read, so a
    file written for the service's environment can be inspected from a shell."""
    try:
        config = load_config(path, check_environment=False)
    except ConfigError as exc:
        return _report(exc, err)
    _notices(config, err)
    out.write(json.dumps(effective(config), indent=2) + "\n")
    return ExitCode.OK
