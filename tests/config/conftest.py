"""Helpers for configuration tests: write a TOML file into `tmp_path` and load it with a private
environment, so no test depends on (or leaks into) the real user's configuration."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from pathlib import Path

import pytest

from agentd.config import paths as config_paths
from agentd.config.load import Config, load_config
from agentd.errors import ConfigError, ConfigProblem

Load = Callable[..., Config]
Problems = Callable[..., list[ConfigProblem]]

MINIMAL = """
[intelligence.main]
kind = "openai"
model = "m"
base_url = "http://127.0.0.1:9/v1"
"""


@pytest.fixture(autouse=True)
def _no_system_config(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """A machine's real /etc/agentd/agentd.toml must not leak into the search order under test."""
    monkeypatch.setattr(config_paths, "SYSTEM_CONFIG", tmp_path / "etc-agentd-absent.toml")


@pytest.fixture
def environ(tmp_path: Path) -> dict[str, str]:
    """A private environment: HOME in tmp_path, no XDG or systemd variables."""
    return {"HOME": str(tmp_path / "home")}


@pytest.fixture
def load(tmp_path: Path, environ: dict[str, str]) -> Load:
    """Write `text` as agentd.toml in tmp_path and load it (`env` adds to the private environment)."""

    def _load(text: str, env: Mapping[str, str] | None = None, *, check_environment: bool = True) -> Config:
        path = tmp_path / "agentd.toml"
        path.write_text(text)
        environ.update(env or {})
        return load_config(str(path), environ=environ, check_environment=check_environment)

    return _load


@pytest.fixture
def problems(load: Load) -> Problems:
    """The problems loading `text` reports (the test fails if it loads)."""

    def _problems(text: str, env: Mapping[str, str] | None = None) -> list[ConfigProblem]:
        with pytest.raises(ConfigError) as caught:
            load(text, env)
        return caught.value.problems

    return _problems


def has_problem(found: list[ConfigProblem], key: str, fragment: str) -> bool:
    return any(p.key == key and fragment in p.message for p in found)
