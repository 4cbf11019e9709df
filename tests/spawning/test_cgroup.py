"""The cgroup v2 layer against a fake cgroupfs tree in a temporary directory.

These machines are cgroup v1 (or hybrid), so `discover` returns None on them and the daemon falls
back to rlimits and process groups. Here a plain directory tree plays the v2 hierarchy: the tests
check which files the layer writes, with which values, in which order, and what it does when the
kernel refuses a write. What a plain directory cannot show — that the kernel enforces
`memory.max`/`pids.max`, that `cgroup.kill` kills, that `rmdir` removes a leaf whose control files
the kernel owns — is listed in docs/testing.md.
"""

from __future__ import annotations

import os
from pathlib import Path

import anyio
import pytest

from agentd.spawning.cgroup import (
    SUPERVISOR_CPU_WEIGHT,
    CgroupLeaf,
    CgroupRoot,
    discover,
    is_pure_v2,
    own_cgroup,
)
from protocol.environment import CGROUP_ENV
from subagent import boot


def fake_v2(
    tmp_path: Path, controllers: str = "cpu io memory pids", rel: str = "system.slice/agentd.service"
) -> tuple[Path, Path, Path]:
    """A v2 mount with this process in `rel`; returns (mount, root of our cgroup, /proc/self/cgroup)."""
    mount = tmp_path / "cgroup"
    root = mount / rel
    root.mkdir(parents=True)
    (mount / "cgroup.controllers").write_text(controllers + "\n")
    (root / "cgroup.controllers").write_text(controllers + "\n")
    (root / "cgroup.procs").write_text(f"{os.getpid()}\n")
    (root / "cgroup.subtree_control").write_text("")
    self_cgroup = tmp_path / "self_cgroup"
    self_cgroup.write_text(f"0::/{rel}\n")
    return mount, root, self_cgroup


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        pytest.param("0::/system.slice/agentd.service\n", "/system.slice/agentd.service", id="pure-v2"),
        pytest.param("12:pids:/x\n1:name=systemd:/y\n0::/user.slice\n", "/user.slice", id="hybrid"),
        pytest.param("0::/\n", "/", id="root"),
        pytest.param("4:memory:/a\n1:cpu:/\n", None, id="pure-v1"),
    ],
)
def test_own_cgroup_reads_the_unified_line(text: str, expected: str | None) -> None:
    assert own_cgroup(text) == expected


def test_a_v1_host_is_not_pure_v2_and_discover_falls_back(tmp_path: Path) -> None:
    mount = tmp_path / "cgroup"
    (mount / "memory").mkdir(parents=True)  # v1: one mount per controller, no cgroup.controllers
    assert not is_pure_v2(mount)
    assert discover(mount, self_cgroup=tmp_path / "missing") is None


def test_discover_moves_the_daemon_to_a_supervisor_leaf_then_delegates_memory_and_pids(
    tmp_path: Path,
) -> None:
    mount, root, self_cgroup = fake_v2(tmp_path, controllers="io memory pids")
    found = discover(mount, self_cgroup=self_cgroup)
    assert found == CgroupRoot(root)
    # No internal processes: the daemon is in supervisor/ before controllers are enabled below root.
    assert (root / "supervisor" / "cgroup.procs").read_text() == str(os.getpid())
    assert (root / "cgroup.subtree_control").read_text() == "+memory +pids"
    assert (root / "tasks" / "cgroup.subtree_control").read_text() == "+memory +pids"


def test_discover_weighs_the_supervisor_leaf_above_the_tasks_where_cpu_is_delegated(
    tmp_path: Path,
) -> None:
    mount, root, self_cgroup = fake_v2(tmp_path)
    assert discover(mount, self_cgroup=self_cgroup) == CgroupRoot(root)
    # A plain file keeps the last write: `+cpu` came after `+memory +pids`, on its own.
    assert (root / "cgroup.subtree_control").read_text() == "+cpu"
    assert (root / "supervisor" / "cpu.weight").read_text() == str(SUPERVISOR_CPU_WEIGHT)
    assert not (root / "tasks" / "cpu.weight").exists()  # the tasks keep the default weight


def test_without_the_cpu_controller_the_supervisor_leaf_gets_no_weight(tmp_path: Path) -> None:
    mount, root, self_cgroup = fake_v2(tmp_path, controllers="io memory pids")
    assert discover(mount, self_cgroup=self_cgroup) == CgroupRoot(root)
    assert (root / "cgroup.subtree_control").read_text() == "+memory +pids"
    assert not (root / "supervisor" / "cpu.weight").exists()


def test_a_refused_cpu_weight_still_delegates_memory_and_pids(tmp_path: Path) -> None:
    mount, root, self_cgroup = fake_v2(tmp_path)
    (root / "supervisor").mkdir()
    (root / "supervisor" / "cpu.weight").mkdir()  # a write the kernel refuses
    assert discover(mount, self_cgroup=self_cgroup) == CgroupRoot(root)
    assert (root / "tasks" / "cgroup.subtree_control").read_text() == "+memory +pids"


def test_discover_falls_back_without_the_memory_or_pids_controller(tmp_path: Path) -> None:
    mount, root, self_cgroup = fake_v2(tmp_path, controllers="cpu io")
    assert discover(mount, self_cgroup=self_cgroup) is None
    assert not (root / "supervisor").exists()


def test_discover_falls_back_when_the_subtree_is_not_writable(tmp_path: Path) -> None:
    if os.geteuid() == 0:
        # root writes through mode bits; a failing write is played by a directory in the way.
        mount, root, self_cgroup = fake_v2(tmp_path)
        (root / "cgroup.subtree_control").unlink()
        (root / "cgroup.subtree_control").mkdir()
    else:
        mount, root, self_cgroup = fake_v2(tmp_path)
        root.chmod(0o555)
    try:
        assert discover(mount, self_cgroup=self_cgroup) is None
    finally:
        root.chmod(0o755)


def test_discover_falls_back_when_this_process_has_no_unified_cgroup(tmp_path: Path) -> None:
    mount, _, self_cgroup = fake_v2(tmp_path)
    self_cgroup.write_text("4:memory:/a\n")
    assert discover(mount, self_cgroup=self_cgroup) is None


def test_a_leaf_gets_its_limits_and_no_swap(tmp_path: Path) -> None:
    mount, root, self_cgroup = fake_v2(tmp_path)
    found = discover(mount, self_cgroup=self_cgroup)
    assert found is not None
    leaf = found.create_leaf("t_01ABC/0.1", memory_max=512 << 20, pids_max=64)
    assert leaf is not None
    assert leaf.path == root / "tasks" / "t_01ABC_0.1"  # a handle's separators cannot escape tasks/
    assert (leaf.path / "memory.max").read_text() == str(512 << 20)
    assert (leaf.path / "memory.swap.max").read_text() == "0"
    assert (leaf.path / "pids.max").read_text() == "64"


def test_a_leaf_without_limits_writes_none(tmp_path: Path) -> None:
    root = CgroupRoot(tmp_path)
    (tmp_path / "tasks").mkdir()
    leaf = root.create_leaf("t_1", memory_max=None, pids_max=None)
    assert leaf is not None
    assert list(leaf.path.iterdir()) == []


def test_a_leaf_name_cannot_climb_out_of_tasks(tmp_path: Path) -> None:
    (tmp_path / "tasks").mkdir()
    leaf = CgroupRoot(tmp_path).create_leaf("../../etc", memory_max=None, pids_max=None)
    assert leaf is not None
    assert leaf.path.parent == tmp_path / "tasks"
    assert leaf.path.name == ".._.._etc"


def test_a_leaf_the_kernel_refuses_is_removed_and_reported_as_none(tmp_path: Path) -> None:
    (tmp_path / "tasks").mkdir()
    # The kernel refuses a write (EINVAL for a bad value, EACCES without delegation): played by a
    # directory where pids.max should be, which open(..., "w") cannot write.
    leaf_path = tmp_path / "tasks" / "t_1"
    leaf_path.mkdir()
    (leaf_path / "pids.max").mkdir()
    assert CgroupRoot(tmp_path).create_leaf("t_1", memory_max=None, pids_max=10) is None


def test_a_missing_tasks_directory_gives_no_leaf(tmp_path: Path) -> None:
    assert CgroupRoot(tmp_path).create_leaf("t_1", memory_max=1 << 30, pids_max=10) is None


def test_kill_writes_1_to_cgroup_kill(tmp_path: Path) -> None:
    leaf = CgroupLeaf(tmp_path)
    leaf.kill()
    assert (tmp_path / "cgroup.kill").read_text() == "1"


def test_kill_of_a_vanished_leaf_is_quiet(tmp_path: Path) -> None:
    CgroupLeaf(tmp_path / "gone").kill()  # best effort: the leaf may already be removed


@pytest.mark.parametrize(
    ("events", "killed"),
    [
        pytest.param("low 0\nhigh 0\nmax 3\noom 1\noom_kill 1\noom_group_kill 0\n", True, id="killed"),
        pytest.param("low 0\nhigh 0\nmax 0\noom 0\noom_kill 0\n", False, id="quiet"),
        pytest.param("oom 2\n", False, id="oom-without-kill"),
    ],
)
def test_oom_killed_reads_memory_events(tmp_path: Path, events: str, killed: bool) -> None:
    (tmp_path / "memory.events").write_text(events)
    assert CgroupLeaf(tmp_path).oom_killed() is killed


def test_oom_killed_is_false_without_memory_events(tmp_path: Path) -> None:
    assert CgroupLeaf(tmp_path).oom_killed() is False


def test_remove_rmdirs_an_empty_leaf_and_is_quiet_otherwise(tmp_path: Path) -> None:
    empty = tmp_path / "empty"
    empty.mkdir()
    CgroupLeaf(empty).remove()
    assert not empty.exists()
    # On cgroupfs a leaf's control files vanish with rmdir; a busy leaf (EBUSY) or, here, a plain
    # directory with files (ENOTEMPTY) is left alone without raising: rmdir, never a recursive delete.
    busy = tmp_path / "busy"
    busy.mkdir()
    (busy / "cgroup.procs").write_text("123\n")
    CgroupLeaf(busy).remove()
    assert (busy / "cgroup.procs").exists()
    CgroupLeaf(tmp_path / "gone").remove()


def test_a_booting_subagent_joins_the_leaf_named_in_its_environment(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    (tmp_path / "cgroup.procs").write_text("")
    monkeypatch.setenv(CGROUP_ENV, str(tmp_path))
    boot.join_cgroup()
    assert (tmp_path / "cgroup.procs").read_text() == str(os.getpid())


def test_a_subagent_that_cannot_join_its_leaf_boots_anyway(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capfd: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv(CGROUP_ENV, str(tmp_path / "gone"))
    boot.join_cgroup()  # best effort: the supervisor's fallbacks still hold the child
    assert "could not join cgroup leaf" in capfd.readouterr().err


def kernel_leaf(path: Path, *, populated: bool) -> CgroupLeaf:
    path.mkdir()
    (path / "cgroup.events").write_text(f"populated {int(populated)}\nfrozen 0\n")
    return CgroupLeaf(path)


def kernel_removes(path: Path) -> None:
    """What the kernel does on rmdir of an empty cgroup: its control files go with it."""
    for child in path.iterdir():
        child.unlink()


@pytest.mark.anyio
async def test_retire_kills_a_leftover_waits_until_the_leaf_is_empty_then_removes_it(tmp_path: Path) -> None:
    leaf = kernel_leaf(tmp_path / "t_1", populated=True)  # an escapee the process group missed
    seen: list[str] = []

    async def play_the_kernel() -> None:
        while not (leaf.path / "cgroup.kill").exists():  # noqa: ASYNC110 - a file, as the kernel sees it
            await anyio.sleep(0.005)
        seen.append((leaf.path / "cgroup.kill").read_text())
        kernel_removes(leaf.path)  # the SIGKILLs were delivered: empty, control files as after rmdir
        (leaf.path / "cgroup.events").write_text("populated 0\n")
        kernel_removes(leaf.path)

    with anyio.fail_after(5):
        async with anyio.create_task_group() as tg:
            tg.start_soon(play_the_kernel)
            await leaf.retire(timeout_s=3)
    assert seen == ["1"]
    assert not leaf.path.exists()


@pytest.mark.anyio
async def test_retire_of_an_empty_leaf_removes_it_without_killing(tmp_path: Path) -> None:
    leaf = kernel_leaf(tmp_path / "t_1", populated=False)
    kernel_removes(leaf.path)
    await leaf.retire()
    assert not leaf.path.exists()


@pytest.mark.anyio
async def test_retire_is_bounded_when_the_leaf_never_empties(tmp_path: Path) -> None:
    leaf = kernel_leaf(tmp_path / "t_1", populated=True)  # e.g. a process stuck in D state
    with anyio.fail_after(2):
        await leaf.retire(timeout_s=0.1)
    assert (leaf.path / "cgroup.kill").read_text() == "1"
    assert leaf.path.exists()  # rmdir refused (EBUSY on cgroupfs): left, not raised


@pytest.mark.parametrize(
    ("events", "populated"),
    [
        pytest.param("populated 1\nfrozen 0\n", True, id="busy"),
        pytest.param("populated 0\nfrozen 0\n", False, id="empty"),
        pytest.param(None, False, id="gone"),
    ],
)
def test_populated_reads_cgroup_events(tmp_path: Path, events: str | None, populated: bool) -> None:
    if events is not None:
        (tmp_path / "cgroup.events").write_text(events)
    assert CgroupLeaf(tmp_path).populated() is populated
