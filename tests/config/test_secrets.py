"""Secrets are references: read at call time, never in repr, `config show`, or an error message,
and key files every user can read are refused."""

from __future__ import annotations

import io
import os
from pathlib import Path

import pytest

from agentd.cli.config_commands import cmd_show
from agentd.errors import ConfigError
from tests.config.conftest import Load, Problems, has_problem

SECRET = "sk-live-SECRET-0123456789abcdef"
ENDPOINT = "[intelligence.main]\nkind = 'openai'\nmodel = 'm'\n"


def _key_file(tmp_path: Path, mode: int, content: str = SECRET + "\n") -> Path:
    path = tmp_path / "key"
    path.write_text(content)
    os.chmod(path, mode)
    return path


def test_an_env_key_is_read_at_call_time_and_stays_masked(load: Load) -> None:
    env = {"OPENAI_KEY": SECRET}
    config = load(ENDPOINT + "api_key_env = 'OPENAI_KEY'\n", env)
    (endpoint,) = config.endpoint_chain("main")
    assert endpoint.api_key is not None and endpoint.api_key.get_secret_value() == SECRET
    for text in (repr(config), str(config), repr(endpoint), endpoint.model_dump_json()):
        assert SECRET not in text
    assert isinstance(config.environ, dict)
    config.environ["OPENAI_KEY"] = "rotated"
    (endpoint,) = config.endpoint_chain("main")
    assert endpoint.api_key is not None and endpoint.api_key.get_secret_value() == "rotated"


def test_a_variable_unset_at_call_time_is_an_error_naming_key_and_variable(load: Load) -> None:
    config = load(ENDPOINT + "api_key_env = 'OPENAI_KEY'\n", {"OPENAI_KEY": SECRET})
    assert isinstance(config.environ, dict)
    del config.environ["OPENAI_KEY"]
    with pytest.raises(ConfigError) as caught:
        config.endpoint_chain(None)
    (problem,) = caught.value.problems
    assert problem.key == "intelligence.main.api_key_env"
    assert "OPENAI_KEY is not set" in problem.message


def test_a_missing_variable_is_a_validation_error(problems: Problems) -> None:
    found = problems(ENDPOINT + "api_key_env = 'NOT_SET_ANYWHERE'\n")
    assert has_problem(
        found, "intelligence.main.api_key_env", "environment variable NOT_SET_ANYWHERE is not set"
    )


def test_an_inline_key_is_refused_with_the_reason_and_without_echoing_it(problems: Problems) -> None:
    (problem,) = problems(ENDPOINT + f"api_key = '{SECRET}'\n")
    assert problem.key == "intelligence.main.api_key"
    assert "api_key_env" in problem.message and "api_key_file" in problem.message
    assert SECRET not in str(problem)


@pytest.mark.parametrize(
    "text",
    [
        pytest.param(ENDPOINT + f"api_key_env = ['{SECRET}']\n", id="secret-in-a-wrong-type"),
        pytest.param(
            ENDPOINT + f"headers = {{ Authorization = 'Bearer {SECRET}' }}\n", id="secret-in-a-header"
        ),
        pytest.param(ENDPOINT + f"api_key_env = '{SECRET}'\n", id="secret-as-a-variable-name"),
        pytest.param(f"[daemon]\nsocket = '{SECRET}\n", id="secret-in-a-syntax-error"),
        pytest.param(ENDPOINT + f"tokn = '{SECRET}'\n", id="secret-under-an-unknown-key"),
        pytest.param(
            f"[mcp.x]\ncommand = 'a'\nenv = {{ TOKEN = '{SECRET}' }}\nurl = 'http://h/'\n",
            id="secret-in-a-bad-server",
        ),
    ],
)
def test_no_error_message_echoes_a_value(problems: Problems, text: str) -> None:
    found = problems(text)
    assert found
    assert all(SECRET not in str(p) for p in found)


def test_a_private_key_file_is_read_and_stripped(load: Load, tmp_path: Path) -> None:
    path = _key_file(tmp_path, 0o600)
    (endpoint,) = load(ENDPOINT + f"api_key_file = '{path}'\n").endpoint_chain(None)
    assert endpoint.api_key is not None and endpoint.api_key.get_secret_value() == SECRET


@pytest.mark.parametrize(
    ("mode", "content", "fragment"),
    [
        pytest.param(
            0o644, SECRET, "every user can read or write it (mode 0644); run `chmod 600", id="world-readable"
        ),
        pytest.param(0o602, SECRET, "mode 0602", id="world-writable"),
        pytest.param(0o600, "  \n", "is empty", id="empty"),
    ],
)
def test_an_unusable_key_file_is_refused(
    problems: Problems, tmp_path: Path, mode: int, content: str, fragment: str
) -> None:
    path = _key_file(tmp_path, mode, content)
    found = problems(ENDPOINT + f"api_key_file = '{path}'\n")
    assert has_problem(found, "intelligence.main.api_key_file", fragment)
    assert all(SECRET not in str(p) for p in found)


def test_a_missing_key_file_is_named(problems: Problems, tmp_path: Path) -> None:
    found = problems(ENDPOINT + "api_key_file = 'nope.key'\n")
    assert has_problem(found, "intelligence.main.api_key_file", f"cannot read {tmp_path / 'nope.key'}")


def test_mcp_secrets_come_from_env_file_env_and_env_from_in_that_order(load: Load, tmp_path: Path) -> None:
    env_file = tmp_path / "fs.env"
    env_file.write_text(f"# tokens\nexport TOKEN='{SECRET}'\nA=from-file\nB=from-file\n\n")
    os.chmod(env_file, 0o600)
    text = "[mcp.fs]\ncommand = 'mcp-fs'\nenv_file = 'fs.env'\nenv = { A = 'plain' }\nenv_from = { B = 'HOST_B' }\n"
    spec = load(text, {"HOST_B": "from-host"}).mcp_spec("fs")
    assert {k: v.get_secret_value() for k, v in spec.env.items()} == {
        "TOKEN": SECRET,
        "A": "plain",
        "B": "from-host",
    }
    assert SECRET not in repr(spec) and SECRET not in spec.model_dump_json()


def test_a_bad_env_file_line_is_reported_by_number_not_content(problems: Problems, tmp_path: Path) -> None:
    env_file = tmp_path / "fs.env"
    env_file.write_text(f"OK=1\n{SECRET}\n")
    os.chmod(env_file, 0o600)
    found = problems("[mcp.fs]\ncommand = 'mcp-fs'\nenv_file = 'fs.env'\n")
    assert has_problem(found, "mcp.fs.env_file", "line 2 is not KEY=VALUE")
    assert all(SECRET not in str(p) for p in found)


def test_http_headers_from_the_environment_are_secrets(load: Load) -> None:
    text = "[mcp.web]\nurl = 'https://mcp.example/mcp'\nheaders_from = { Authorization = 'WEB_AUTH' }\n"
    spec = load(text, {"WEB_AUTH": f"Bearer {SECRET}"}).mcp_spec("web")
    assert spec.headers["Authorization"].get_secret_value() == f"Bearer {SECRET}"
    assert SECRET not in repr(spec)


def test_show_masks_secrets_and_says_where_they_come_from(load: Load, tmp_path: Path) -> None:
    key_file = _key_file(tmp_path, 0o600)
    text = (
        ENDPOINT
        + "api_key_env = 'OPENAI_KEY'\n"
        + f"[intelligence.other]\nkind = 'anthropic'\nmodel = 'm'\napi_key_file = '{key_file}'\n"
        + "[mcp.web]\nurl = 'https://mcp.example/mcp'\nheaders_from = { Authorization = 'WEB_AUTH' }\n"
    )
    config = load(text, {"OPENAI_KEY": SECRET, "WEB_AUTH": SECRET})
    out, err = io.StringIO(), io.StringIO()
    assert config.path is not None
    assert cmd_show(str(config.path), out, err) == 0
    shown = out.getvalue()
    assert SECRET not in shown
    assert '"api_key": "*** (env:OPENAI_KEY)"' in shown
    assert f'"api_key": "*** (file:{key_file})"' in shown
    assert '"Authorization": "*** (env:WEB_AUTH)"' in shown
