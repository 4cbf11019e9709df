"""A state directory another user could change is refused, and nothing in it is followed through a
symlink: planted `agentd.lock` / `agentd.db` links never truncate or chmod
their targets."""

from __future__ import annotations

import os
import stat
from pathlib import Path

import pytest

from agentd.errors import UnsafeDirectory
from agentd.journal.store import open_journal
from tests.support.daemon import refused_start, write_config

pytestmark = pytest.mark.anyio

NOBODY = 65534


async def _open(state_dir: Path) -> None:
    async with open_journal(state_dir):
        pass


def _victim(tmp_path: Path) -> Path:
    victim = tmp_path / "victim"
    victim.write_text("precious\n")
    victim.chmod(0o4755)  # a setuid bit a chmod through a link would strip
    return victim


async def test_a_symlinked_state_dir_is_refused(tmp_path: Path) -> None:
    real = tmp_path / "real"
    real.mkdir(mode=0o700)
    link = tmp_path / "state"
    link.symlink_to(real)
    with pytest.raises(UnsafeDirectory, match="is a symlink"):
        await _open(link)
    assert list(real.iterdir()) == []


@pytest.mark.parametrize(
    ("mode", "why"),
    [
        pytest.param(0o1777, "writable by others", id="world-writable-sticky"),
        pytest.param(0o0770, "writable by its group", id="group-writable"),
    ],
)
async def test_a_state_dir_others_can_write_is_refused(tmp_path: Path, mode: int, why: str) -> None:
    state = tmp_path / "state"
    state.mkdir()
    state.chmod(mode)
    with pytest.raises(UnsafeDirectory, match=why):
        await _open(state)
    assert list(state.iterdir()) == []


@pytest.mark.skipif(os.geteuid() != 0, reason="needs root to chown the directory to another user")
async def test_a_state_dir_owned_by_another_user_is_refused(tmp_path: Path) -> None:
    state = tmp_path / "state"
    state.mkdir(mode=0o700)
    os.chown(state, NOBODY, NOBODY)
    with pytest.raises(UnsafeDirectory, match=f"owned by uid {NOBODY}"):
        await _open(state)


@pytest.mark.parametrize("name", ["agentd.lock", "agentd.db", "agentd.db-wal"])
async def test_a_planted_symlink_in_the_state_dir_is_not_followed(tmp_path: Path, name: str) -> None:
    victim = _victim(tmp_path)
    state = tmp_path / "state"
    state.mkdir(mode=0o700)
    (state / name).symlink_to(victim)
    with pytest.raises(UnsafeDirectory, match=name):
        await _open(state)
    assert victim.read_text() == "precious\n"
    assert stat.S_IMODE(victim.stat().st_mode) == 0o4755


def test_the_daemon_refuses_a_world_writable_state_dir_with_one_line_saying_why(tmp_path: Path) -> None:
    config = write_config(tmp_path, "")
    state = tmp_path / "state"
    state.mkdir()
    state.chmod(0o777)
    why = refused_start(config)
    assert "writable by others" in why
    assert "chmod go-w" in why
    assert not (tmp_path / "agentd.sock").exists()
