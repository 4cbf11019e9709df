"""The unit files: systemd accepts them, the hardening scores 2.0 or better, and the directives the
daemon's contract depends on are there (and the ones that would break it are not)."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from agentd.config.paths import socket_path
from agentd.config.sections import DaemonSection

REPO = Path(__file__).resolve().parents[2]
UNITS = REPO / "systemd"
SERVICE = UNITS / "agentd.service"
SOCKET = UNITS / "agentd.socket"
INSTALLED_AGENTD = "/opt/agentd/venv/bin/agentd"
MAX_EXPOSURE = 2.0
# Between the end of the drain cap and SIGKILL: closing the journal and exiting.
STOP_SLACK_S = 10

ANALYZE = shutil.which("systemd-analyze")
needs_analyze = pytest.mark.skipif(
    ANALYZE is None,
    reason="systemd-analyze is not installed (Debian package `systemd`; scripts/check installs it as root)",
)


def directives(path: Path) -> list[tuple[str, str, str]]:
    """(section, key, value) in file order; repeated keys stay repeated, as systemd reads them."""
    section, found = "", []
    for raw in path.read_text().splitlines():
        line = raw.strip()
        if not line or line.startswith(("#", ";")):
            continue
        if line.startswith("["):
            section = line.strip("[]")
            continue
        key, _, value = line.partition("=")
        found.append((section, key.strip(), value.strip()))
    return found


def values(path: Path, key: str) -> list[str]:
    return [value for _, k, value in directives(path) if k == key]


def one(path: Path, key: str) -> str:
    found = values(path, key)
    assert len(found) == 1, f"{path.name}: {key}= {found}"
    return found[0]


def seconds(value: str) -> float:
    match = re.fullmatch(r"(\d+)(s|min)?", value)
    assert match, value
    return int(match.group(1)) * (60 if match.group(2) == "min" else 1)


@needs_analyze
def test_the_service_scores_2_0_or_better_in_systemd_analyze_security() -> None:
    assert ANALYZE is not None
    done = subprocess.run(
        [ANALYZE, "security", "--offline=true", str(SERVICE)], capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 0, done.stderr
    match = re.search(r"Overall exposure level for agentd\.service: (\d+\.\d+)", done.stdout)
    assert match, done.stdout[-2000:]
    assert float(match.group(1)) <= MAX_EXPOSURE, done.stdout


@needs_analyze
def test_systemd_analyze_verify_accepts_the_units_without_a_warning(tmp_path: Path) -> None:
    # verify insists that ExecStart= names an existing executable: check a copy that points at
    # this checkout's agentd instead of the documented install path; nothing else changes.
    assert ANALYZE is not None
    agentd = Path(sys.executable).parent / "agentd"
    if not os.access(agentd, os.X_OK):
        pytest.skip(f"{agentd} is not installed (run scripts/check, which installs it)")
    text = SERVICE.read_text()
    assert text.count(INSTALLED_AGENTD) == 1
    (tmp_path / SERVICE.name).write_text(text.replace(INSTALLED_AGENTD, str(agentd)))
    shutil.copy(SOCKET, tmp_path / SOCKET.name)
    done = subprocess.run(
        [ANALYZE, "verify", str(tmp_path / SERVICE.name), str(tmp_path / SOCKET.name)],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 0, done.stderr
    assert done.stderr.strip() == "", done.stderr


def test_the_service_keeps_the_daemons_systemd_contract() -> None:
    assert one(SERVICE, "Type") == "notify"
    assert one(SERVICE, "KillMode") == "mixed"
    assert one(SERVICE, "Delegate") == "yes"
    assert one(SERVICE, "ExecReload") == "/bin/kill -HUP $MAINPID"
    assert one(SERVICE, "ExecStart").startswith(INSTALLED_AGENTD + " serve")
    assert seconds(one(SERVICE, "WatchdogSec")) > 0
    drain_cap_s = DaemonSection.model_fields["drain_timeout_s"].default
    assert seconds(one(SERVICE, "TimeoutStopSec")) >= drain_cap_s + STOP_SLACK_S
    assert one(SERVICE, "User") == one(SERVICE, "Group") == "agentd"
    assert set(one(SERVICE, "RestrictAddressFamilies").split()) == {"AF_UNIX", "AF_INET", "AF_INET6"}


@pytest.mark.parametrize(
    ("key", "why"),
    [
        pytest.param("ProtectControlGroups", "makes the delegated cgroup subtree read-only", id="cgroups"),
        pytest.param("PrivateUsers", "maps client uids seen by SO_PEERCRED to nobody", id="users"),
        pytest.param("MemoryDenyWriteExecute", "breaks JITs in MCP servers", id="mdwe"),
        pytest.param("ProcSubset", "hides /proc/stat, which process start times need", id="procsubset"),
        pytest.param("PrivateNetwork", "model endpoints and HTTP MCP servers need IP", id="network"),
    ],
)
def test_the_service_avoids_hardening_that_breaks_agentd(key: str, why: str) -> None:
    assert values(SERVICE, key) == [], f"{key}= {why}"


def test_the_syscall_filter_still_allows_setrlimit_prctl_and_pidfds() -> None:
    filters = values(SERVICE, "SystemCallFilter")
    assert filters[0] == "@system-service"  # includes @resources (setrlimit) and @process (prctl, pidfd_*)
    denied = {group.lstrip("~") for value in filters[1:] for group in value.split() if value.startswith("~")}
    assert denied.isdisjoint({"@resources", "@process", "@signal", "setrlimit", "prlimit64", "prctl"})


def test_the_socket_listens_where_the_daemon_looks_under_systemd() -> None:
    runtime = Path("/run") / one(SERVICE, "RuntimeDirectory")
    assert one(SOCKET, "ListenStream") == str(socket_path({"RUNTIME_DIRECTORY": str(runtime)}, uid=0))
    assert one(SOCKET, "SocketMode") == "0660"
    assert one(SOCKET, "DirectoryMode") == "0750"
    # The service must not delete the socket's directory when it stops.
    assert one(SERVICE, "RuntimeDirectoryPreserve") == "yes"


@pytest.mark.skipif(
    shutil.which("systemd-sysusers") is None or shutil.which("systemd-tmpfiles") is None,
    reason="systemd-sysusers/systemd-tmpfiles are not installed (Debian package `systemd`)",
)
@pytest.mark.skipif(os.geteuid() != 0, reason="systemd-tmpfiles --create chowns: needs root")
def test_sysusers_and_tmpfiles_create_the_user_and_directories_in_an_empty_root(tmp_path: Path) -> None:
    (tmp_path / "etc").mkdir()
    for command in (
        ["systemd-sysusers", f"--root={tmp_path}", str(UNITS / "agentd.sysusers.conf")],
        ["systemd-tmpfiles", f"--root={tmp_path}", "--create", str(UNITS / "agentd.tmpfiles.conf")],
    ):
        done = subprocess.run(command, capture_output=True, text=True, timeout=60)
        assert done.returncode == 0, done.stderr
    passwd = {
        line.split(":")[0]: line.split(":") for line in (tmp_path / "etc/passwd").read_text().splitlines()
    }
    user = passwd["agentd"]
    uid, home = int(user[2]), user[5]
    assert home == "/var/lib/agentd"
    for path, mode in (("run/agentd", 0o750), ("var/lib/agentd", 0o700)):
        st = (tmp_path / path).stat()
        assert (st.st_uid, st.st_mode & 0o7777) == (uid, mode), path


WORKER = UNITS / "agentd-worker.service"


@needs_analyze
def test_the_worker_unit_verifies_and_scores_like_the_service(tmp_path: Path) -> None:
    assert ANALYZE is not None
    done = subprocess.run(
        [ANALYZE, "security", "--offline=true", str(WORKER)], capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 0, done.stderr
    match = re.search(r"Overall exposure level for agentd-worker\.service: (\d+\.\d+)", done.stdout)
    assert match and float(match.group(1)) <= MAX_EXPOSURE, done.stdout[-2000:]
    agentd = Path(sys.executable).parent / "agentd"
    if not os.access(agentd, os.X_OK):
        pytest.skip(f"{agentd} is not installed (run scripts/check, which installs it)")
    (tmp_path / WORKER.name).write_text(WORKER.read_text().replace(INSTALLED_AGENTD, str(agentd)))
    done = subprocess.run(
        [ANALYZE, "verify", str(tmp_path / WORKER.name)], capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 0, done.stderr
    assert done.stderr.strip() == "", done.stderr


def test_the_worker_unit_keeps_the_workers_systemd_contract() -> None:
    assert one(WORKER, "Type") == "notify"
    assert one(WORKER, "KillMode") == "mixed"
    assert one(WORKER, "Delegate") == "yes"
    assert one(WORKER, "ExecStart") == INSTALLED_AGENTD + " worker --config /etc/agentd/agentd.toml"
    drain_cap_s = DaemonSection.model_fields["drain_timeout_s"].default
    assert seconds(one(WORKER, "TimeoutStopSec")) >= drain_cap_s + STOP_SLACK_S
    # Its own journal: never the front door's state directory (one agentd per state directory).
    assert one(WORKER, "StateDirectory") != one(SERVICE, "StateDirectory")
    assert one(WORKER, "Environment") == f"AGENTD_STATE_DIR=/var/lib/{one(WORKER, 'StateDirectory')}"
    assert values(WORKER, "ProtectControlGroups") == values(WORKER, "PrivateUsers") == []
    assert values(WORKER, "SystemCallFilter") == values(SERVICE, "SystemCallFilter")
