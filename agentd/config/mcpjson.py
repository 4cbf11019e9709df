"""Import of MCP servers from the `mcpServers` JSON format written for desktop MCP clients.

`{"mcpServers": {"name": {"command": "...", "args": [...], "env": {...}}, "web": {"url": "...",
"headers": {...}}}}`, with an optional `"type": "stdio" | "http" | "streamable-http" | "sse"` (a
url whose path ends in `/sse` means the legacy SSE transport when no type is given). Each entry
becomes an `McpServer` with the same meaning it has in those clients: `command` is one program
(not split), and `env`/`headers` values are treated as secrets (masked by `config show`); a
value that is exactly `${NAME}` reads the daemon's environment variable NAME at call time.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from pathlib import Path
from typing import Literal
from urllib.parse import urlsplit

from pydantic import BaseModel, ConfigDict, Field, SecretStr, ValidationError

from agentd.config.problems import problems_from_validation, render_key
from agentd.config.secrets import SecretFileError, SecretSource, check_private_file
from agentd.config.servers import McpSection, McpServer
from agentd.errors import ConfigProblem

MAX_JSON_BYTES = 4 * 1024 * 1024
# `${NAME}` (Claude Desktop, Cursor) or `${env:NAME}` (VS Code): the whole value.
_REFERENCE = re.compile(r"^\$\{(?:env:)?([A-Za-z_][A-Za-z0-9_]*)\}$")


EnvValue = str | int | float | bool
# Keys desktop clients write that change nothing here: agentd never asks before a tool call (so
# approval lists have no effect) and shows no UI.
_NO_APPROVAL = (
    "agentd never asks before running a granted tool; restrict tools with an [mcp.NAME] table's `tools`"
)
IGNORED_KEYS = {
    "autoApprove": _NO_APPROVAL,
    "alwaysAllow": _NO_APPROVAL,
    "description": "",
    "icon": "",
    "gallery": "",
    "version": "",
}


class JsonServer(BaseModel):
    """One `mcpServers` entry. Keys of no meaning here are kept aside and reported as notices."""

    model_config = ConfigDict(extra="allow", frozen=True, populate_by_name=True)

    type: Literal["stdio", "http", "streamable-http", "streamableHttp", "sse"] | None = None
    command: str | None = Field(default=None, min_length=1)
    args: list[str] = Field(default_factory=list)
    env: dict[str, EnvValue] = Field(default_factory=dict)
    env_file: str | None = Field(default=None, alias="envFile")
    cwd: str | None = None
    url: str | None = Field(default=None, min_length=1)
    headers: dict[str, str] = Field(default_factory=dict)
    disabled: bool = False
    # Seconds a request may take (Cline, Roo Code); agentd's `call_timeout_s`.
    timeout: float | None = Field(default=None, gt=0)
    autoApprove: list[str] = Field(default_factory=list)
    alwaysAllow: list[str] = Field(default_factory=list)


class JsonFile(BaseModel):
    # Other top-level keys are allowed: the file may be a whole desktop-client settings file.
    model_config = ConfigDict(extra="ignore", frozen=True)

    mcpServers: dict[str, JsonServer] | None = None
    # VS Code's `.vscode/mcp.json` spelling of the same map.
    servers: dict[str, JsonServer] | None = None

    @property
    def entries(self) -> dict[str, JsonServer]:
        return {**(self.servers or {}), **(self.mcpServers or {})}


def _sources(
    values: Mapping[str, EnvValue], where: str, origin: str, problems: list[ConfigProblem]
) -> dict[str, SecretSource]:
    found: dict[str, SecretSource] = {}
    for name, raw in values.items():
        # Clients accept `"PORT": 3000` and `"DEBUG": true`; the environment holds strings.
        value = raw if isinstance(raw, str) else json.dumps(raw)
        if reference := _REFERENCE.match(value):
            found[name] = SecretSource("env", reference.group(1), where=f"{where}.{name}")
        elif "${" in value:
            problems.append(
                ConfigProblem(
                    f"{where}.{name}",
                    "only a whole-value ${NAME} reference is supported (no ${...} inside text)",
                )
            )
        else:
            found[name] = SecretSource("inline", origin, where=f"{where}.{name}", value=SecretStr(value))
    return found


def entry_notices(where: str, entry: JsonServer) -> list[str]:
    """Notices for the keys of an entry that do nothing here (an unknown key is named, not refused)."""
    notices: list[str] = []
    for key in ("autoApprove", "alwaysAllow"):
        if getattr(entry, key):
            notices.append(f"{where}.{key}: ignored: {IGNORED_KEYS[key]}")
    for key in entry.model_extra or {}:
        if key in IGNORED_KEYS:
            continue
        notices.append(f"{where}.{key}: unknown key, ignored")
    return notices


def _server(
    name: str, entry: JsonServer, path: Path, problems: list[ConfigProblem], notices: list[str]
) -> McpServer | None:
    where = f"{file_key(path)}: {render_key(('mcpServers', name))}"
    notices.extend(entry_notices(where, entry))
    raw = {
        "transport": json_transport(entry),
        "command": [entry.command] if entry.command is not None else None,
        "args": entry.args,
        "url": entry.url,
        "cwd": entry.cwd,
        "env_file": entry.env_file,
        "call_timeout_s": entry.timeout,
    }
    try:
        section = McpSection.model_validate(
            {k: v for k, v in raw.items() if v is not None}, context={"base_dir": path.parent}
        )
    except ValidationError as exc:
        problems.extend(problems_from_validation(exc, McpSection, prefix=where))
        return None
    origin = str(path)
    return McpServer(
        name=name,
        section=section,
        origin=f"json:{path}",
        key=where,
        env=_sources(entry.env, f"{where}.env", origin, problems),
        headers=_sources(entry.headers, f"{where}.headers", origin, problems),
    )


def json_transport(entry: JsonServer) -> Literal["stdio", "http", "sse"] | None:
    """The transport an entry means: its `type`, else an SSE url (path ending in `/sse`), else
    unset (stdio for a command, streamable HTTP for a url)."""
    if entry.type in ("streamable-http", "streamableHttp", "http"):
        return "http"
    if entry.type in ("stdio", "sse"):
        return entry.type
    if entry.url is not None and urlsplit(entry.url).path.rstrip("/").endswith("/sse"):
        return "sse"
    return None


def file_key(path: Path) -> str:
    """How problems inside the imported file are keyed: `mcp_servers_json (<path>): <key in it>`."""
    return f"mcp_servers_json ({path})"


def import_mcp_json(path: Path) -> tuple[dict[str, McpServer], list[ConfigProblem], list[str]]:
    """The servers of the mcpServers file at `path`, the problems found, and notices (entries
    skipped because they are `disabled`)."""
    key = file_key(path)
    try:
        data = path.read_bytes()[: MAX_JSON_BYTES + 1]
    except OSError as exc:
        return {}, [ConfigProblem("mcp_servers_json", f"cannot read {path}: {exc.strerror}")], []
    if len(data) > MAX_JSON_BYTES:
        return {}, [ConfigProblem(key, f"larger than {MAX_JSON_BYTES} bytes")], []
    try:
        parsed = JsonFile.model_validate(json.loads(data))
    except json.JSONDecodeError as exc:
        # Position only: the text around the error may be a secret.
        return (
            {},
            [ConfigProblem(key, f"not valid JSON ({exc.msg} at line {exc.lineno}, column {exc.colno})")],
            [],
        )
    except ValidationError as exc:
        found = problems_from_validation(exc, JsonFile)
        return {}, [ConfigProblem(f"{key}: {p.key}" if p.key else key, p.message) for p in found], []
    problems: list[ConfigProblem] = []
    notices: list[str] = []
    servers: dict[str, McpServer] = {}
    if parsed.mcpServers is None and parsed.servers is None:
        return {}, [ConfigProblem(key, "has no mcpServers (or servers) object")], []
    for name, entry in parsed.entries.items():
        if entry.disabled:
            notices.append(f"{key}: server {name!r} is disabled there; not imported")
            continue
        if server := _server(name, entry, path, problems, notices):
            servers[name] = server
    if any(
        s.kind == "inline"
        for server in servers.values()
        for s in (*server.env.values(), *server.headers.values())
    ):
        try:
            check_private_file(str(path))
        except SecretFileError as exc:
            problems.append(ConfigProblem("mcp_servers_json", str(exc)))
    return servers, problems, notices
