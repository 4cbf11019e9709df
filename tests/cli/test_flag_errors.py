"""Every usage error names the flag a person typed and says the rule in words: no internal field,
no regular expression, durations with their unit. Checked before any daemon is reached."""

from __future__ import annotations

from pathlib import Path

import pytest

from agentd.cli.main import main


@pytest.fixture(autouse=True)
def _nowhere(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    # No configuration, and no daemon at the socket: a command that got as far as connecting
    # would fail with exit 1, not 2.
    for name in ("AGENTD_CONFIG", "XDG_CONFIG_HOME", "AGENTD_STATE_DIR", "RUNTIME_DIRECTORY"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("HOME", str(tmp_path))
    monkeypatch.setenv("AGENTD_SOCKET", str(tmp_path / "no-daemon.sock"))


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        pytest.param(
            ["run", "x", "--mcp", "python server.py"],
            "agentd run: --mcp 'python server.py': expected NAME=COMMAND ARGS... (a stdio server), "
            "NAME=http(s)://URL, or the NAME of a configured server",
            id="mcp-without-name",
        ),
        pytest.param(
            ["run", "x", "--mcp", "my server=python server.py"],
            "agentd run: --mcp 'my server=python server.py': the NAME before '=' must use letters, digits, "
            "'_', '.' and '-', starting with a letter or digit (at most 64)",
            id="mcp-bad-name",
        ),
        pytest.param(
            ["run", "x", "--mcp", "files"],
            "agentd run: --mcp: no MCP server named 'files' is configured (available: none); to start one "
            "for this run, give --mcp NAME=COMMAND ARGS...",
            id="mcp-not-configured",
        ),
        pytest.param(
            ["run", "x", "--intelligence", "http://127.0.0.1:9/v1"],
            "agentd run: --intelligence http://127.0.0.1:9/v1 needs --model NAME: the model to ask the "
            "endpoint for (for example --model gpt-4.1-mini, or --model llama3.1 for Ollama)",
            id="intelligence-without-model",
        ),
        pytest.param(
            ["run", "x", "--intelligence", "http://127.0.0.1:9/v1", "--model", "m", "--api-key-env", "1BAD"],
            "agentd run: --api-key-env: must be an environment variable name (letters, digits and '_', "
            "not starting with a digit)",
            id="api-key-env-not-a-name",
        ),
        pytest.param(
            ["run", "x", "--model", "nope"],
            "agentd run: --model: no intelligence endpoint named 'nope' is configured (available: demo)",
            id="model-not-configured",
        ),
        pytest.param(
            ["run", "x", "--deadline", "0s"],
            "agentd run: --deadline: must be more than 0s",
            id="run-deadline",
        ),
        pytest.param(
            ["submit", "x", "--every", "500ms"], "agentd submit: --every: must be at least 1s", id="every"
        ),
        pytest.param(
            ["submit", "x", "--max-steps", "0"], "agentd submit: --max-steps: must be at least 1", id="steps"
        ),
        pytest.param(
            ["submit", "x", "--mcp", "a b"],
            "agentd submit: --mcp: use letters, digits, '_', '.' and '-', starting with a letter or digit",
            id="submit-mcp-name",
        ),
        pytest.param(["list", "--limit", "0"], "agentd list: --limit: must be at least 1", id="list-limit"),
    ],
)
def test_a_usage_error_names_the_flag_and_the_rule(
    argv: list[str], message: str, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(argv) == 2
    assert capsys.readouterr().err == message + "\n"


def test_an_unreadable_config_given_to_a_client_command_is_named(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    missing = tmp_path / "nope.toml"
    assert main(["status", "t_1", "--config", str(missing)]) == 2
    assert capsys.readouterr().err == (
        f"agentd status: --config {missing}: cannot read the socket from it: No such file or directory\n"
    )
