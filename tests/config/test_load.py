"""Finding and loading the configuration: search order, path overrides, embedded defaults, the
example file, relative paths, and an import that stays light."""

from __future__ import annotations

import json
import subprocess
import sys
import tomllib
from pathlib import Path

import jsonschema
import pytest

from agentd.config import paths as config_paths
from agentd.config.file import EMBEDDED_ENDPOINT, EMBEDDED_SCRIPT, AgentdFile
from agentd.config.load import EMBEDDED_SOURCE, load_config
from agentd.config.sections import LoopSection
from agentd.errors import ConfigError
from protocol.spawn import Limits, LoopKnobs
from tests.config.conftest import Load

REPO = Path(__file__).resolve().parents[2]
EXAMPLE = REPO / "examples" / "agentd.toml"
EXAMPLE_ENV = {
    "OPENAI_API_KEY": "k1",
    "ANTHROPIC_API_KEY": "k2",
    "GITHUB_TOKEN": "k3",
    "SEARCH_MCP_AUTH": "k4",
}


def _marked(path: Path, tasks: int) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(f"[daemon]\nmax_concurrent_tasks = {tasks}\n")
    return path


@pytest.mark.parametrize(
    ("flag", "env", "files", "expected"),
    [
        pytest.param(
            "flag.toml",
            {"AGENTD_CONFIG": "env.toml"},
            ["flag.toml", "env.toml", "xdg/agentd/agentd.toml", "etc.toml"],
            1,
            id="flag-first",
        ),
        pytest.param(
            None,
            {"AGENTD_CONFIG": "env.toml"},
            ["env.toml", "xdg/agentd/agentd.toml", "etc.toml"],
            2,
            id="env-second",
        ),
        pytest.param(
            None, {"XDG_CONFIG_HOME": "xdg"}, ["xdg/agentd/agentd.toml", "etc.toml"], 3, id="xdg-third"
        ),
        pytest.param(
            None, {}, ["home/.config/agentd/agentd.toml", "etc.toml"], 4, id="home-config-when-xdg-unset"
        ),
        pytest.param(
            None,
            {"XDG_CONFIG_HOME": "relative/xdg"},
            ["home/.config/agentd/agentd.toml"],
            4,
            id="relative-xdg-ignored",
        ),
        pytest.param(None, {}, ["etc.toml"], 5, id="etc-last"),
        pytest.param(None, {}, [], 8, id="embedded-defaults"),
    ],
)
def test_the_search_order_picks_the_first_configuration_found(
    monkeypatch: pytest.MonkeyPatch,
    tmp_path: Path,
    flag: str | None,
    env: dict[str, str],
    files: list[str],
    expected: int,
) -> None:
    marks = {
        "flag.toml": 1,
        "env.toml": 2,
        "xdg/agentd/agentd.toml": 3,
        "home/.config/agentd/agentd.toml": 4,
        "etc.toml": 5,
    }
    for name in files:
        _marked(tmp_path / name, marks[name])
    monkeypatch.setattr(config_paths, "SYSTEM_CONFIG", tmp_path / "etc.toml")
    for name in ("AGENTD_CONFIG", "XDG_CONFIG_HOME", "AGENTD_SOCKET", "AGENTD_STATE_DIR"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    for name, value in env.items():
        monkeypatch.setenv(name, value if value.startswith("relative") else str(tmp_path / value))
    config = load_config(str(tmp_path / flag) if flag else None)
    assert config.daemon.max_concurrent_tasks == expected


@pytest.mark.parametrize(
    ("flag", "env", "named_by"),
    [
        pytest.param("missing.toml", {}, "--config", id="flag"),
        pytest.param(None, {"AGENTD_CONFIG": "missing.toml"}, "$AGENTD_CONFIG", id="env"),
    ],
)
def test_an_explicitly_named_file_must_exist(
    tmp_path: Path, flag: str | None, env: dict[str, str], named_by: str
) -> None:
    environ = {"HOME": str(tmp_path)} | {k: str(tmp_path / v) for k, v in env.items()}
    with pytest.raises(ConfigError) as caught:
        load_config(str(tmp_path / flag) if flag else None, environ=environ)
    assert f"does not exist (named by {named_by})" in str(caught.value)


def test_without_a_file_the_embedded_defaults_run_the_scripted_demo(tmp_path: Path) -> None:
    config = load_config(environ={"HOME": str(tmp_path)})
    assert config.source == EMBEDDED_SOURCE
    assert config.path is None
    (endpoint,) = config.endpoint_chain(None)
    assert (endpoint.name, endpoint.kind, endpoint.api_key) == (EMBEDDED_ENDPOINT, "scripted", None)
    assert endpoint.script_path == str(EMBEDDED_SCRIPT)
    assert EMBEDDED_SCRIPT.parent == REPO / "agentd" / "examples" / "scripts"
    assert EMBEDDED_SCRIPT.is_file()


def test_an_empty_file_is_the_embedded_defaults(load: Load, tmp_path: Path) -> None:
    assert load("").file == load_config(environ={"HOME": str(tmp_path)}).file


def test_declaring_an_endpoint_replaces_the_embedded_one(load: Load) -> None:
    config = load("[intelligence.local]\nkind = 'openai'\nmodel = 'm'\nbase_url = 'http://127.0.0.1:1/v1'\n")
    assert list(config.intelligence) == ["local"]
    assert config.default_model == "local"


def test_the_embedded_defaults_match_the_protocol_defaults(tmp_path: Path) -> None:
    config = load_config(environ={"HOME": str(tmp_path)})
    limits = Limits()
    assert (config.defaults.max_steps, config.defaults.max_tokens, config.defaults.deadline_s) == (
        limits.max_steps,
        limits.max_tokens,
        limits.deadline_s,
    )
    assert config.loop_knobs() == LoopKnobs()


def test_the_loop_section_mirrors_every_loop_knob_with_its_constraints() -> None:
    assert list(LoopSection.model_fields) == list(LoopKnobs.model_fields)
    for name, knob in LoopKnobs.model_fields.items():
        section = LoopSection.model_fields[name]
        assert (section.annotation, section.default, section.metadata) == (
            knob.annotation,
            knob.default,
            knob.metadata,
        )
        assert section.description


def test_the_example_config_validates(tmp_path: Path) -> None:
    config = load_config(str(EXAMPLE), environ={"HOME": str(tmp_path), **EXAMPLE_ENV})
    assert config.default_model == "openai"
    assert [e.name for e in config.endpoint_chain(None)] == ["openai", "anthropic", "local"]
    assert config.notices == ()


def test_the_example_config_satisfies_the_published_schema() -> None:
    schema = AgentdFile.model_json_schema(by_alias=True)
    jsonschema.validate(tomllib.loads(EXAMPLE.read_text()), schema)


def test_every_key_of_the_file_is_documented() -> None:
    undocumented = []

    def walk(model: type, prefix: str) -> None:
        for name, field in model.model_fields.items():  # type: ignore[attr-defined]
            if field.exclude:
                continue
            key = f"{prefix}{field.alias or name}"
            if not field.description:
                undocumented.append(key)
            annotation = field.annotation
            for candidate in (annotation, *getattr(annotation, "__args__", ())):
                if isinstance(candidate, type) and hasattr(candidate, "model_fields"):
                    walk(candidate, key + ".")

    walk(AgentdFile, "")
    assert undocumented == []


def test_the_reference_documents_every_key() -> None:
    reference = (REPO / "docs" / "configuration.md").read_text()
    schema = AgentdFile.model_json_schema(by_alias=True)
    missing = [
        f"{section}.{key}"
        for section, definition in schema["$defs"].items()
        for key in definition["properties"]
        if f"`{key}`" not in reference
    ]
    assert missing == []


def test_relative_paths_resolve_against_the_config_files_directory(load: Load, tmp_path: Path) -> None:
    (tmp_path / "s.json").write_text("{}")
    config = load("[intelligence.d]\nkind = 'scripted'\nscript = 's.json'\n")
    assert config.endpoint_chain("d")[0].script_path == str(tmp_path / "s.json")


def test_a_missing_script_is_reported_by_its_key_and_path(load: Load, tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match=r"intelligence\.d\.script: .*nope\.json is not a readable file"):
        load("[intelligence.d]\nkind = 'scripted'\nscript = 'nope.json'\n")


def test_a_scripted_endpoint_without_a_script_plays_the_bundled_one(load: Load) -> None:
    config = load("[intelligence.d]\nkind = 'scripted'\n")
    assert config.endpoint_chain("d")[0].script_path == str(EMBEDDED_SCRIPT)


# ---- socket and state directory -----------------------------------------------------------------


@pytest.mark.parametrize(
    ("override", "env", "configured", "expected"),
    [
        pytest.param(
            "/flag.sock", {"AGENTD_SOCKET": "/env.sock"}, "/file.sock", "/flag.sock", id="flag-wins"
        ),
        pytest.param(None, {"AGENTD_SOCKET": "/env.sock"}, "/file.sock", "/env.sock", id="env-beats-file"),
        pytest.param(
            None, {"RUNTIME_DIRECTORY": "/run/x"}, "/file.sock", "/file.sock", id="file-beats-systemd"
        ),
        pytest.param(
            None,
            {"RUNTIME_DIRECTORY": "/run/agentd:/run/other", "XDG_RUNTIME_DIR": "/run/user/7"},
            None,
            "/run/agentd/agentd.sock",
            id="systemd-first-directory",
        ),
        pytest.param(
            None, {"XDG_RUNTIME_DIR": "/run/user/7"}, None, "/run/user/7/agentd/agentd.sock", id="xdg-runtime"
        ),
        pytest.param(
            None, {"XDG_RUNTIME_DIR": "rel"}, None, "/tmp/agentd-1000/agentd.sock", id="relative-xdg-ignored"
        ),
        pytest.param(None, {}, None, "/tmp/agentd-1000/agentd.sock", id="fallback-per-uid"),
    ],
)
def test_the_socket_path_follows_flag_env_file_systemd_xdg(
    override: str | None, env: dict[str, str], configured: str | None, expected: str
) -> None:
    assert str(config_paths.socket_path(env, configured, override, uid=1000)) == expected


def test_root_without_a_runtime_directory_uses_run_agentd() -> None:
    assert str(config_paths.socket_path({}, uid=0)) == "/run/agentd/agentd.sock"


USER_XDG = "/run/user/1000/agentd/agentd.sock"
SYSTEM = "/run/agentd/agentd.sock"


@pytest.mark.parametrize(
    ("override", "env", "configured", "sockets", "expected"),
    [
        pytest.param(
            "/flag.sock", {"AGENTD_SOCKET": "/env.sock"}, "/file.sock", {SYSTEM}, "/flag.sock", id="flag"
        ),
        pytest.param(None, {"AGENTD_SOCKET": "/env.sock"}, "/file.sock", {SYSTEM}, "/env.sock", id="env"),
        pytest.param(None, {}, "/file.sock", {SYSTEM}, "/file.sock", id="file"),
        pytest.param(
            None,
            {"XDG_RUNTIME_DIR": "/run/user/1000"},
            None,
            {USER_XDG, SYSTEM},
            USER_XDG,
            id="per-user-first",
        ),
        pytest.param(None, {"XDG_RUNTIME_DIR": "/run/user/1000"}, None, {SYSTEM}, SYSTEM, id="system-next"),
        pytest.param(
            None,
            {},
            None,
            {"/tmp/agentd-1000/agentd.sock", SYSTEM},
            "/tmp/agentd-1000/agentd.sock",
            id="per-user-tmp",
        ),
        pytest.param(None, {}, None, {SYSTEM}, SYSTEM, id="group-member-without-settings"),
        pytest.param(
            None,
            {"XDG_RUNTIME_DIR": "/run/user/1000"},
            None,
            set(),
            USER_XDG,
            id="none-names-the-per-user-path",
        ),
        # A flag or variable is taken as given, even where nothing listens yet.
        pytest.param(
            None, {"AGENTD_SOCKET": "/nowhere.sock"}, None, {SYSTEM}, "/nowhere.sock", id="env-as-given"
        ),
    ],
)
def test_a_client_searches_flag_env_file_then_the_per_user_then_the_system_socket(
    override: str | None, env: dict[str, str], configured: str | None, sockets: set[str], expected: str
) -> None:
    found = config_paths.client_socket_path(
        env, configured, override, uid=1000, is_socket=lambda p: str(p) in sockets
    )
    assert str(found) == expected


@pytest.mark.parametrize(
    ("override", "env", "configured", "expected"),
    [
        pytest.param("/flag", {"AGENTD_STATE_DIR": "/env"}, "/file", "/flag", id="flag-wins"),
        pytest.param(None, {"AGENTD_STATE_DIR": "/env"}, "/file", "/env", id="env-beats-file"),
        pytest.param(None, {"STATE_DIRECTORY": "/var/lib/agentd"}, "/file", "/file", id="file-beats-systemd"),
        pytest.param(
            None,
            {"STATE_DIRECTORY": "/var/lib/agentd", "XDG_STATE_HOME": "/x"},
            None,
            "/var/lib/agentd",
            id="systemd",
        ),
        pytest.param(None, {"XDG_STATE_HOME": "/x", "HOME": "/h"}, None, "/x/agentd", id="xdg-state"),
        pytest.param(None, {"HOME": "/h"}, None, "/h/.local/state/agentd", id="home-default"),
    ],
)
def test_the_state_dir_follows_flag_env_file_systemd_xdg(
    override: str | None, env: dict[str, str], configured: str | None, expected: str
) -> None:
    assert str(config_paths.state_dir(env, configured, override)) == expected


def test_the_loader_applies_flags_over_the_environment_and_the_file(load: Load) -> None:
    text = "[daemon]\nsocket = '/file.sock'\nstate_dir = '/file'\n"
    config = load(text, {"AGENTD_SOCKET": "/env.sock", "AGENTD_STATE_DIR": "/env"})
    assert (str(config.socket), str(config.state_dir)) == ("/env.sock", "/env")
    config = load_config(config.source, environ=dict(config.environ), socket="/flag.sock", state_dir="/flag")
    assert (str(config.socket), str(config.state_dir)) == ("/flag.sock", "/flag")


def test_a_socket_path_too_long_for_a_unix_socket_is_refused(load: Load) -> None:
    with pytest.raises(ConfigError, match=r"daemon\.socket: .* longer than the 107 bytes"):
        load(f"[daemon]\nsocket = '/{'s' * 120}.sock'\n")


# ---- import cost --------------------------------------------------------------------------------


def test_importing_the_config_loads_no_mcp_or_http_client() -> None:
    code = (
        "import json, sys, agentd.config.load, agentd.cli.config_commands; "
        "print(json.dumps(sorted(m for m in sys.modules if m.split('.')[0] in ('mcp', 'httpx2', 'httpx', 'subagent'))))"
    )
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=60, cwd=REPO, check=True
    )
    assert json.loads(done.stdout) == []


def test_an_endpoints_temperature_reaches_its_spec(load: Load) -> None:
    text = "[intelligence.local]\nkind = 'openai'\nmodel = 'm'\nbase_url = 'http://127.0.0.1:1/v1'\n"
    (unset,) = load(text).endpoint_chain("local")
    (cold,) = load(text + "temperature = 0\n").endpoint_chain("local")
    assert (unset.temperature, cold.temperature) == (None, 0.0)
