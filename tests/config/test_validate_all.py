"""`agentd config validate` names every problem in one run, gates are checked against the tools
their servers list, and `--no-env` checks the file alone."""

from __future__ import annotations

import io
import sys
from pathlib import Path

import pytest

from agentd.cli.config_commands import cmd_validate
from agentd.config.bundled import DEMO_SERVER
from tests.config.conftest import Problems, has_problem

REPO = Path(__file__).resolve().parents[2]
UNSET = "AGENTD_TEST_NEVER_SET_ANYWHERE"


@pytest.fixture(autouse=True)
def _private_environment(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    for name in ("AGENTD_CONFIG", "XDG_CONFIG_HOME", "AGENTD_SOCKET", "AGENTD_STATE_DIR", UNSET):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("HOME", str(tmp_path / "home"))


def validate(tmp_path: Path, text: str, *, check_environment: bool = True) -> tuple[int, str, str]:
    path = tmp_path / "agentd.toml"
    path.write_text(text)
    out, err = io.StringIO(), io.StringIO()
    code = cmd_validate(str(path), out, err, check_environment=check_environment)
    return code, out.getvalue(), err.getvalue()


THREE_MISTAKES = f"""
[daemon]
max_concurent_tasks = 4

[defaults]
deadline = "10 minutes"

[intelligence.main]
kind = "openai"
model = "m"
api_key_env = "{UNSET}"
"""


def test_one_run_names_an_unknown_key_a_bad_duration_and_an_unset_variable(tmp_path: Path) -> None:
    code, out, err = validate(tmp_path, THREE_MISTAKES)
    assert (code, out) == (2, "")
    lines = err.splitlines()
    assert lines[0] == f"agentd: invalid configuration ({tmp_path / 'agentd.toml'}):"
    assert lines[1].startswith(
        "  daemon.max_concurent_tasks: unknown key; did you mean 'max_concurrent_tasks'? allowed here: socket, "
    )
    assert lines[2:] == [
        "  defaults.deadline: expected a duration like 30s, 5m, 2h, 1d or a number of seconds, got '10 minutes'",
        f"  intelligence.main.api_key_env: environment variable {UNSET} is not set (or is empty): set it in "
        "the daemon's environment (a systemd service: EnvironmentFile=, docs/operations.md)",
        "hint: the environment problems are about this shell's environment; `agentd config validate "
        "--no-env` checks the file alone",
    ]


def test_no_env_checks_the_file_alone(tmp_path: Path) -> None:
    code, _, err = validate(tmp_path, THREE_MISTAKES, check_environment=False)
    assert code == 2
    assert UNSET not in err
    assert "daemon.max_concurent_tasks" in err and "defaults.deadline" in err


def test_the_example_configuration_passes_without_its_environment() -> None:
    out, err = io.StringIO(), io.StringIO()
    code = cmd_validate(str(REPO / "examples" / "agentd.toml"), out, err, check_environment=False)
    assert (code, err.getvalue()) == (0, "")
    assert out.getvalue() == (
        f"ok: {REPO / 'examples' / 'agentd.toml'} (4 endpoint(s), 4 MCP server(s), 1 trigger(s)); "
        "environment not checked (--no-env)\n"
    )


def test_a_bad_entry_is_set_aside_and_the_others_keep_their_index(problems: Problems) -> None:
    found = problems(
        "[mcp.files]\ncommand = 'true'\ntrust = []\n"
        "[[trigger]]\nserver = 'files'\nuri = 'a://1'\ninstruction = 'x'\nroute = 'bogus'\n"
        "[[trigger]]\nserver = 'nope'\nuri = 'a://2'\ninstruction = 'y'\n"
    )
    assert [str(p) for p in found] == [
        "trigger[0].route: should be 'spawn' or 'continue'",
        "trigger[1].server: no MCP server named 'nope' (available: files)",
    ]


def test_an_invalid_endpoint_is_not_reported_again_as_missing(problems: Problems) -> None:
    found = problems("[defaults]\nmodel = 'main'\n[intelligence.main]\nkind = 'gemini'\n")
    assert [str(p) for p in found] == [
        "intelligence.main.kind: should be 'openai', 'anthropic' or 'scripted'"
    ]


def test_a_gate_matching_none_of_the_allowed_tools_is_an_error(problems: Problems) -> None:
    found = problems(
        "[mcp.fs]\ncommand = 'true'\ntrust = []\ntools = ['read_file', 'merge_pr']\n"
        "approval = ['merge_*', 'mrege_*', '*']\n"
    )
    assert has_problem(
        found,
        "mcp.fs.approval[1]",
        "'mrege_*' matches none of the tools this server grants (its `tools`): merge_pr, read_file; "
        "it would gate nothing: correct the pattern or remove it",
    )
    assert len(found) == 1


DEMO = f"""
[mcp.demo]
command = ["{sys.executable}", "{DEMO_SERVER}"]
trust = []
approval = {{approval}}
"""


@pytest.mark.processes
def test_a_gate_matching_none_of_the_tools_the_server_lists_is_an_error(tmp_path: Path) -> None:
    code, out, err = validate(tmp_path, DEMO.format(approval='["word_*", "add"]'))
    assert (code, out) == (2, "")
    assert err.splitlines()[1:] == [
        "  mcp.demo.approval[1]: 'add' matches none of the tools the server lists: post, read_note, "
        "search_notes, word_count; it would gate nothing: correct the pattern or remove it"
    ]


@pytest.mark.processes
def test_gates_that_match_the_listed_tools_pass(tmp_path: Path) -> None:
    code, out, err = validate(tmp_path, DEMO.format(approval='["word_*", "read_note"]'))
    assert (code, err) == (0, "")
    assert out.startswith("ok: ")


@pytest.mark.processes
def test_an_unreachable_server_is_a_note_that_its_gates_were_not_checked(tmp_path: Path) -> None:
    missing = tmp_path / "no-such-server"
    text = f"[mcp.gone]\ncommand = ['{missing}']\ntrust = []\napproval = ['x']\n"
    code, out, err = validate(tmp_path, text)
    assert code == 0, err
    assert out.startswith("ok: ")
    assert err == (
        "note: mcp.gone.approval: not checked: the server could not be reached (could not start the "
        f"server: No such file or directory: {missing})\n"
    )


def test_with_no_env_no_server_is_started_and_a_note_says_so(tmp_path: Path) -> None:
    code, _, err = validate(tmp_path, DEMO.format(approval='["add"]'), check_environment=False)
    assert code == 0
    assert err == "note: mcp.demo.approval: not checked against the server's tools (--no-env)\n"
