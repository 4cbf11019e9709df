"""Where a client command connects: `--config FILE`'s socket, and the system socket when its
directory is there but closed to the caller (so the error says how to get access)."""

from __future__ import annotations

from pathlib import Path

import pytest

from agentd.cli import client_commands
from agentd.cli.client_commands import resolve_socket
from agentd.config import paths as config_paths


@pytest.fixture(autouse=True)
def _private_environment(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    for name in ("AGENTD_CONFIG", "XDG_CONFIG_HOME", "RUNTIME_DIRECTORY"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    monkeypatch.setenv("XDG_RUNTIME_DIR", str(tmp_path / "run"))
    monkeypatch.setattr(config_paths, "SYSTEM_CONFIG", tmp_path / "etc-agentd-absent.toml")


def test_the_config_flags_socket_is_relative_to_its_file_and_beats_the_environment(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("AGENTD_SOCKET", str(tmp_path / "from-env.sock"))
    config = tmp_path / "conf" / "agentd.toml"
    config.parent.mkdir()
    config.write_text('[daemon]\nsocket = "run/agentd.sock"\n')
    assert resolve_socket(None, str(config)) == tmp_path / "conf" / "run" / "agentd.sock"
    assert resolve_socket(str(tmp_path / "flag.sock"), str(config)) == tmp_path / "flag.sock"


def test_a_config_without_a_socket_leaves_the_usual_search(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("AGENTD_SOCKET", raising=False)
    config = tmp_path / "agentd.toml"
    config.write_text("[daemon]\nmax_concurrent_tasks = 2\n")
    assert resolve_socket(None, str(config)) == tmp_path / "run" / "agentd" / "agentd.sock"


def test_a_socket_behind_a_directory_the_caller_may_not_search_is_chosen(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    closed = tmp_path / "closed"
    closed.mkdir()
    behind = closed / "agentd.sock"
    real_stat = Path.stat

    def stat(self: Path, **kwargs: bool):  # type: ignore[no-untyped-def]
        if self == behind:
            raise PermissionError(13, "Permission denied")
        return real_stat(self, **kwargs)

    monkeypatch.setattr(Path, "stat", stat)
    assert client_commands._is_socket(behind)
    assert not client_commands._is_socket(tmp_path / "absent" / "agentd.sock")
