"""`agentd config validate|schema|show`: exit codes, what goes to which stream, and the schema."""

from __future__ import annotations

import io
import json
from collections.abc import Callable
from pathlib import Path

import pytest

from agentd.cli.config_commands import cmd_schema, cmd_show, cmd_validate


@pytest.fixture(autouse=True)
def _private_environment(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    for name in (
        "AGENTD_CONFIG",
        "XDG_CONFIG_HOME",
        "AGENTD_SOCKET",
        "AGENTD_STATE_DIR",
        "RUNTIME_DIRECTORY",
        "STATE_DIRECTORY",
    ):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("HOME", str(tmp_path / "home"))


def _run(command: Callable[..., int], *args: object) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    code = command(*args, out, err)
    return code, out.getvalue(), err.getvalue()


def test_validate_accepts_a_valid_file_with_exit_0(tmp_path: Path) -> None:
    path = tmp_path / "a.toml"
    path.write_text("[daemon]\nmax_concurrent_tasks = 2\n")
    code, out, err = _run(cmd_validate, str(path))
    assert (code, err) == (0, "")
    assert out == f"ok: {path} (1 endpoint(s), 0 MCP server(s), 0 trigger(s))\n"


def test_validate_without_a_file_checks_the_embedded_defaults() -> None:
    code, out, _ = _run(cmd_validate, None)
    assert code == 0 and out.startswith("ok: embedded defaults")


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        pytest.param(
            "[mcp.fs]\ncommand = 'x'\nurl = 'http://h/'\n",
            "  mcp.fs.url: a server has either command",
            id="semantic",
        ),
        pytest.param(
            "[daemon]\nsockett = 1\n",
            "  daemon.sockett: unknown key; did you mean 'socket'?",
            id="unknown-key",
        ),
        pytest.param("[daemon\n", "  TOML syntax error:", id="syntax"),
    ],
)
def test_validate_reports_each_problem_under_its_key_with_exit_2(
    tmp_path: Path, text: str, expected: str
) -> None:
    path = tmp_path / "a.toml"
    path.write_text(text)
    code, out, err = _run(cmd_validate, str(path))
    assert (code, out) == (2, "")
    assert err.startswith(f"agentd: invalid configuration ({path}):\n")
    assert expected in err


def test_validate_of_a_missing_file_exits_2(tmp_path: Path) -> None:
    code, _, err = _run(cmd_validate, str(tmp_path / "nope.toml"))
    assert code == 2 and "does not exist (named by --config)" in err


def test_validate_prints_notices_to_stderr(tmp_path: Path) -> None:
    path = tmp_path / "a.toml"
    path.write_text("[intelligence.x]\nkind = 'openai'\nmodel = 'm'\nbase_url = 'http://10.1.2.3:8000/v1'\n")
    code, _, err = _run(cmd_validate, str(path))
    assert code == 0
    assert "note: intelligence.x.base_url: plain http to a non-loopback host" in err


def test_schema_is_json_schema_of_every_table() -> None:
    out = io.StringIO()
    assert cmd_schema(out) == 0
    schema = json.loads(out.getvalue())
    assert schema["title"] == "agentd.toml"
    assert set(schema["properties"]) == {
        "daemon",
        "defaults",
        "limits",
        "supervision",
        "loop",
        "security",
        "journal",
        "metrics",
        "executor",
        "budgets",
        "intelligence",
        "mcp",
        "mcp_servers_json",
        "trigger",
        "schedule",
    }
    intelligence = schema["$defs"]["IntelligenceSection"]
    assert "api_key" not in intelligence["properties"]
    assert intelligence["additionalProperties"] is False


def test_show_prints_the_effective_config_even_when_secrets_are_unset(tmp_path: Path) -> None:
    path = tmp_path / "a.toml"
    path.write_text(
        "[intelligence.x]\nkind = 'openai'\nmodel = 'm'\napi_key_env = 'UNSET_HERE'\n[limits]\nmemory_max = 1073741824\n"
    )
    code, out, _ = _run(cmd_show, str(path))
    assert code == 0
    shown = json.loads(out)
    assert shown["source"] == str(path)
    assert shown["intelligence"]["x"]["api_key"] == "*** (env:UNSET_HERE)"
    assert shown["intelligence"]["x"]["base_url"] == "https://api.openai.com/v1"
    assert shown["defaults"]["model"] == "x"
    assert shown["limits"]["memory_max"] == "1G"
    assert shown["daemon"]["state_dir"] == str(tmp_path / "home" / ".local" / "state" / "agentd")


def test_show_of_an_invalid_file_exits_2(tmp_path: Path) -> None:
    path = tmp_path / "a.toml"
    path.write_text("[defaults]\nmodel = 'nope'\n")
    code, out, err = _run(cmd_show, str(path))
    assert (code, out) == (2, "")
    assert "defaults.model: no endpoint named 'nope'" in err


def test_show_masks_credentials_written_inline_and_validate_says_where_they_belong(tmp_path: Path) -> None:
    path = tmp_path / "a.toml"
    path.write_text(
        "[intelligence.x]\nkind = 'openai'\nmodel = 'm'\n"
        "base_url = 'https://alice:hunter2@llm.example/v1'\n"
        "[mcp.web]\nurl = 'https://mcp.example/mcp?token=s3cret&region=eu'\n"
        "[mcp.fs]\ncommand = ['fs-server', '--api-key', 'k3y', '--root=/srv', 'PASSWORD=pw']\n"
    )
    code, out, _ = _run(cmd_show, str(path))
    assert code == 0
    for secret in ("alice", "hunter2", "s3cret", "k3y", "pw"):
        assert secret not in out
    shown = json.loads(out)
    assert shown["intelligence"]["x"]["base_url"] == "https://***@llm.example/v1"
    assert shown["mcp"]["web"]["url"] == "https://mcp.example/mcp?token=***&region=***"
    assert shown["mcp"]["fs"]["command"] == ["fs-server", "--api-key", "***", "--root=/srv", "PASSWORD=***"]
    code, _, err = _run(cmd_validate, str(path))
    assert code == 0
    assert "intelligence.x.base_url: carries what looks like a credential (userinfo)" in err
    assert "api_key_env or api_key_file" in err
    assert "mcp.web.url: carries what looks like a credential (query 'token')" in err
    assert (
        "mcp.fs.command: passes what looks like a credential on the command line (--api-key, PASSWORD)" in err
    )
    for secret in ("hunter2", "s3cret", "k3y"):
        assert secret not in err
