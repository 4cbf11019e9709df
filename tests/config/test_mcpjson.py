"""The desktop clients' mcpServers JSON maps onto [mcp.*]: same meaning, secrets masked, TOML wins."""

from __future__ import annotations

import io
import json
import os
from pathlib import Path

import pytest

from agentd.cli.config_commands import cmd_show
from tests.config.conftest import Load, Problems, has_problem

SECRET = "ghp_SECRETSECRETSECRET"


def _json(tmp_path: Path, servers: object, mode: int = 0o600) -> str:
    path = tmp_path / "mcp.json"
    path.write_text(json.dumps({"mcpServers": servers, "globalShortcut": "Ctrl+Space"}))
    os.chmod(path, mode)
    return f"mcp_servers_json = '{path.name}'\n"


def test_a_stdio_entry_becomes_a_stdio_server(load: Load, tmp_path: Path) -> None:
    servers = {
        "gh": {
            "command": "npx",
            "args": ["-y", "@modelcontextprotocol/server-github"],
            "env": {"TOKEN": SECRET},
        }
    }
    config = load(_json(tmp_path, servers))
    spec = config.mcp_spec("gh")
    assert (spec.transport, spec.command) == ("stdio", ["npx", "-y", "@modelcontextprotocol/server-github"])
    assert spec.env["TOKEN"].get_secret_value() == SECRET
    assert config.mcp["gh"].origin == f"json:{tmp_path / 'mcp.json'}"


def test_a_command_with_spaces_stays_one_program_as_in_the_desktop_clients(
    load: Load, tmp_path: Path
) -> None:
    spec = load(_json(tmp_path, {"x": {"command": "/opt/My Tools/server"}})).mcp_spec("x")
    assert spec.command == ["/opt/My Tools/server"]


@pytest.mark.parametrize("kind", [None, "http", "streamable-http"])
def test_a_url_entry_becomes_an_http_server(load: Load, tmp_path: Path, kind: str | None) -> None:
    entry: dict[str, object] = {
        "url": "https://mcp.example/mcp",
        "headers": {"Authorization": f"Bearer {SECRET}"},
    }
    if kind:
        entry["type"] = kind
    spec = load(_json(tmp_path, {"web": entry})).mcp_spec("web")
    assert (spec.transport, spec.url) == ("http", "https://mcp.example/mcp")
    assert spec.headers["Authorization"].get_secret_value() == f"Bearer {SECRET}"


@pytest.mark.parametrize(
    ("entry", "transport"),
    [
        ({"type": "sse", "url": "https://mcp.example/events"}, "sse"),
        ({"url": "https://mcp.example/sse"}, "sse"),
        ({"url": "https://mcp.example/sse/"}, "sse"),
        ({"type": "http", "url": "https://mcp.example/sse"}, "http"),
        ({"url": "https://mcp.example/mcp?next=/sse"}, "http"),
    ],
)
def test_an_sse_entry_becomes_a_legacy_sse_server(
    load: Load, tmp_path: Path, entry: dict[str, object], transport: str
) -> None:
    spec = load(_json(tmp_path, {"web": entry})).mcp_spec("web")
    assert (spec.transport, spec.url) == (transport, entry["url"])


def test_an_env_reference_reads_the_daemons_variable_at_call_time(load: Load, tmp_path: Path) -> None:
    config = load(
        _json(tmp_path, {"gh": {"command": "gh-mcp", "env": {"TOKEN": "${GH_TOKEN}"}}}), {"GH_TOKEN": SECRET}
    )
    assert config.mcp_spec("gh").env["TOKEN"].get_secret_value() == SECRET


def test_the_toml_table_wins_a_name_clash_with_a_notice(load: Load, tmp_path: Path) -> None:
    text = (
        _json(tmp_path, {"fs": {"command": "from-json"}, "other": {"command": "o"}})
        + "[mcp.fs]\ncommand = 'from-toml'\n"
    )
    config = load(text)
    assert config.mcp_spec("fs").command == ["from-toml"]
    assert set(config.mcp) == {"fs", "other"}
    assert any("'fs' is also an [mcp.fs] table; the table wins" in n for n in config.notices)


def test_the_keys_desktop_clients_write_are_mapped_or_named_in_notices(load: Load, tmp_path: Path) -> None:
    entry = {
        "command": "srv",
        "env": {"PORT": 3000, "DEBUG": True, "TOKEN": "${env:GH_TOKEN}"},
        "timeout": 90,
        "autoApprove": ["read"],
        "alwaysAllow": ["write"],
        "transportOptions": {"x": 1},
    }
    config = load(_json(tmp_path, {"x": entry}), env={"GH_TOKEN": SECRET})
    spec = config.mcp_spec("x")
    assert spec.call_timeout_s == 90
    assert spec.tools is None  # an approval list is not an allow-list
    assert {k: v.get_secret_value() for k, v in spec.env.items()} == {
        "PORT": "3000",
        "DEBUG": "true",
        "TOKEN": SECRET,
    }
    where = f"mcp_servers_json ({tmp_path / 'mcp.json'}): mcpServers.x"
    assert any(n.startswith(f"{where}.autoApprove: ignored: agentd never asks") for n in config.notices)
    assert any(n.startswith(f"{where}.alwaysAllow: ignored") for n in config.notices)
    assert f"{where}.transportOptions: unknown key, ignored" in config.notices


def test_vs_code_servers_spelling_is_read_too(load: Load, tmp_path: Path) -> None:
    path = tmp_path / "mcp.json"
    path.write_text(json.dumps({"servers": {"web": {"type": "http", "url": "https://mcp.example/mcp"}}}))
    spec = load("mcp_servers_json = 'mcp.json'\n").mcp_spec("web")
    assert (spec.transport, spec.url) == ("http", "https://mcp.example/mcp")


def test_a_disabled_entry_is_skipped_with_a_notice(load: Load, tmp_path: Path) -> None:
    config = load(_json(tmp_path, {"off": {"command": "x", "disabled": True}}))
    assert "off" not in config.mcp
    assert any("'off' is disabled" in n for n in config.notices)


def test_imported_servers_can_be_granted_by_default(load: Load, tmp_path: Path) -> None:
    config = load(_json(tmp_path, {"fs": {"command": "x"}}) + "[defaults]\nmcp = ['fs']\n")
    assert config.defaults.mcp == ["fs"]


@pytest.mark.parametrize(
    ("servers", "key_suffix", "fragment"),
    [
        pytest.param(
            {"x": {"command": "a", "url": "https://h/"}}, "mcpServers.x.url", "not both", id="command-and-url"
        ),
        pytest.param(
            {"x": {"args": ["a"]}}, "mcpServers.x.url", "required for an http server", id="no-command"
        ),
        pytest.param(
            {"x": {"command": "a", "env": {"T": "Bearer ${TOK}"}}},
            "mcpServers.x.env.T",
            "whole-value ${NAME}",
            id="partial-reference",
        ),
        pytest.param(
            {"my server": {"command": "a"}},
            'mcpServers."my server"',
            "server names use letters",
            id="bad-name",
        ),
        pytest.param(
            {"x": {"command": "a", "env": {"T": "${UNSET_VAR}"}}},
            "mcpServers.x.env.T",
            "UNSET_VAR is not set",
            id="unset-reference",
        ),
    ],
)
def test_a_bad_entry_is_named_inside_the_json_file(
    problems: Problems, tmp_path: Path, servers: object, key_suffix: str, fragment: str
) -> None:
    found = problems(_json(tmp_path, servers))
    assert has_problem(found, f"mcp_servers_json ({tmp_path / 'mcp.json'}): {key_suffix}", fragment), [
        str(p) for p in found
    ]


def test_invalid_json_gives_the_position_and_not_the_text(problems: Problems, tmp_path: Path) -> None:
    (tmp_path / "mcp.json").write_text('{"mcpServers": {"x": {"env": {"T": "' + SECRET + '"}}\n')
    (problem,) = problems("mcp_servers_json = 'mcp.json'\n")
    assert "not valid JSON" in problem.message and "line 2, column 1" in problem.message
    assert SECRET not in str(problem)


def test_a_file_without_mcp_servers_is_refused(problems: Problems, tmp_path: Path) -> None:
    (tmp_path / "mcp.json").write_text('{"globalShortcut": "Ctrl+Space"}')
    found = problems("mcp_servers_json = 'mcp.json'\n")
    assert has_problem(found, f"mcp_servers_json ({tmp_path / 'mcp.json'})", "has no mcpServers (or servers)")


def test_a_world_readable_file_with_secrets_is_refused(problems: Problems, tmp_path: Path) -> None:
    found = problems(_json(tmp_path, {"gh": {"command": "x", "env": {"T": SECRET}}}, mode=0o644))
    assert has_problem(found, "mcp_servers_json", "every user can read or write it")


def test_a_world_readable_file_without_secrets_is_fine(load: Load, tmp_path: Path) -> None:
    assert (
        "gh"
        in load(_json(tmp_path, {"gh": {"command": "x", "env": {"T": "${T}"}}}, mode=0o644), {"T": "v"}).mcp
    )


def test_show_masks_imported_values_and_names_the_file(load: Load, tmp_path: Path) -> None:
    config = load(_json(tmp_path, {"gh": {"command": "x", "env": {"TOKEN": SECRET}}}))
    out = io.StringIO()
    assert cmd_show(str(config.path), out, io.StringIO()) == 0
    assert SECRET not in out.getvalue()
    assert f'"TOKEN": "*** (json:{tmp_path / "mcp.json"})"' in out.getvalue()
