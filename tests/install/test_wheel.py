"""A plain install works on its defaults: the wheel, installed into a fresh virtual environment
outside the checkout, runs `agentd demo`, `agentd run` and `agentd serve` from an empty directory.

The wheel is built from a copy of the sources (the build writes `build/` next to them). Its
dependencies are borrowed from this test's environment through a `.pth` file rather than
installed (that takes half a minute): the test proves the package's own files — code, the
example MCP server and the scripts the defaults play — and that nothing is found through the
checkout (docs/decisions.md, "What the defaults run ships inside the package").
"""

from __future__ import annotations

import os
import queue
import shutil
import signal
import site
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import IO

import pytest

from agentd.config.paths import SYSTEM_CONFIG

REPO = Path(__file__).resolve().parents[2]
SOURCES = (
    "pyproject.toml",
    "README.md",
    "protocol",
    "processes",
    "subagent",
    "agentd",
    "mcp_serve",
    "dashboard",
)
BUILD_TIMEOUT_S = 180.0
COMMAND_TIMEOUT_S = 60.0
STOP_TIMEOUT_S = 30.0
INSTRUCTION = "remember the plan"
# What the embedded defaults' script (notes-roundtrip) answers.
ANSWER = f"My notes say: task: {INSTRUCTION}\n"

pytestmark = [
    pytest.mark.install,
    pytest.mark.processes,
    pytest.mark.timeout(300),
    pytest.mark.skipif(SYSTEM_CONFIG.exists(), reason=f"{SYSTEM_CONFIG} would replace the embedded defaults"),
]


@dataclass(frozen=True)
class Install:
    venv: Path
    cwd: Path
    env: dict[str, str]

    def python(self, *args: str) -> subprocess.CompletedProcess[str]:
        """The installed environment's interpreter with `args`, from outside the checkout."""
        return subprocess.run(
            [str(self.venv / "bin" / "python"), *args],
            capture_output=True,
            text=True,
            timeout=60,
            cwd=self.cwd,
            env=self.env,
        )

    def agentd(self, *args: str, timeout_s: float = COMMAND_TIMEOUT_S) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [str(self.venv / "bin" / "agentd"), *args],
            capture_output=True,
            text=True,
            timeout=timeout_s,
            cwd=self.cwd,
            env=self.env,
        )


def _clean_env() -> dict[str, str]:
    """This environment without what would find the checkout or another daemon."""
    dropped = ("PYTHONPATH", "AGENTD_CONFIG", "AGENTD_SOCKET", "AGENTD_STATE_DIR", "VIRTUAL_ENV")
    return {k: v for k, v in os.environ.items() if k not in dropped and not k.startswith("XDG_")}


def _build_wheel(into: Path) -> Path:
    source = into / "src"
    source.mkdir()
    for name in SOURCES:
        path = REPO / name
        if path.is_dir():
            shutil.copytree(path, source / name, ignore=shutil.ignore_patterns("__pycache__"))
        else:
            shutil.copy2(path, source / name)
    dist = into / "dist"
    subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "--no-deps", "--quiet", "--wheel-dir", str(dist), str(source)],
        check=True,
        capture_output=True,
        timeout=BUILD_TIMEOUT_S,
        env=_clean_env(),
    )
    (wheel,) = dist.glob("agentd-*.whl")
    return wheel


def _fresh_venv(into: Path, wheel: Path) -> Path:
    venv = into / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True, timeout=60)
    pip = [sys.executable, "-m", "pip", "--python", str(venv / "bin" / "python")]
    subprocess.run(
        [*pip, "install", "--no-deps", "--quiet", str(wheel)],
        check=True,
        capture_output=True,
        timeout=BUILD_TIMEOUT_S,
        env=_clean_env(),
    )
    (packages,) = venv.glob("lib/python*/site-packages")
    # Plain directories on sys.path: their own .pth files (an editable agentd's) are not run.
    (packages / "borrowed_dependencies.pth").write_text("\n".join(site.getsitepackages()) + "\n")
    return venv


@pytest.fixture(scope="module")
def installed() -> Iterator[Install]:
    # Under /tmp, short: the socket path must fit in 107 bytes.
    root = Path(tempfile.mkdtemp(prefix="agentd-wheel-"))
    try:
        venv = _fresh_venv(root, _build_wheel(root))
        home, cwd, runtime = root / "home", root / "cwd", root / "run"
        for directory in (home, cwd, runtime):
            directory.mkdir(mode=0o700)
        env = _clean_env() | {
            "HOME": str(home),
            "XDG_RUNTIME_DIR": str(runtime),
            "PATH": f"{venv / 'bin'}:{os.environ.get('PATH', '')}",
        }
        yield Install(venv, cwd, env)
    finally:
        shutil.rmtree(root, ignore_errors=True)


def test_agentd_is_imported_from_the_fresh_environment_not_the_checkout(installed: Install) -> None:
    done = installed.python("-c", "import agentd, subagent; print(agentd.__file__); print(subagent.__file__)")
    assert done.returncode == 0, done.stderr
    assert all(Path(line).is_relative_to(installed.venv) for line in done.stdout.splitlines()), done.stdout


def test_the_example_server_runs_as_a_module_as_the_trigger_recipe_says(installed: Install) -> None:
    done = installed.python("-m", "agentd.examples.mcp_demo_server", "--help")
    assert done.returncode == 0, done.stderr
    assert "--port" in done.stdout


def test_the_dashboards_pages_ship_in_the_package(installed: Install) -> None:
    # Served from the installed package (no build step): every file the checkout has.
    done = installed.python(
        "-c", "import dashboard.app as a; print(*sorted(p.name for p in a.STATIC.iterdir()), a.STATIC)"
    )
    assert done.returncode == 0, done.stderr
    *names, where = done.stdout.split()
    assert Path(where).is_relative_to(installed.venv)
    assert names == sorted(p.name for p in (REPO / "dashboard" / "static").iterdir())


def test_demo_runs_the_bundled_server_and_script(installed: Install) -> None:
    done = installed.agentd("demo")
    assert done.returncode == 0, done.stdout + done.stderr
    assert "notes://ladder" in done.stdout
    assert "daemon drained and stopped (exit 0)" in done.stdout


def test_run_on_the_embedded_defaults_prints_the_scripted_answer(installed: Install) -> None:
    done = installed.agentd("run", INSTRUCTION)
    assert (done.returncode, done.stdout) == (0, ANSWER), done.stderr[-3000:]


def _lines(stream: IO[str]) -> queue.Queue[str]:
    lines: queue.Queue[str] = queue.Queue()

    def pump() -> None:
        for line in stream:
            lines.put(line)

    threading.Thread(target=pump, daemon=True).start()
    return lines


def _wait_for_line(lines: queue.Queue[str], needle: str, timeout_s: float) -> list[str]:
    seen: list[str] = []
    deadline = time.monotonic() + timeout_s
    while not any(needle in line for line in seen):
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            raise AssertionError(f"no {needle!r} in {timeout_s:g}s; saw:\n{''.join(seen)[-3000:]}")
        try:
            seen.append(lines.get(timeout=remaining))
        except queue.Empty:
            continue
    return seen


def test_serve_on_the_embedded_defaults_runs_a_task_and_stops_cleanly_on_sigterm(installed: Install) -> None:
    daemon = subprocess.Popen(
        [str(installed.venv / "bin" / "agentd"), "serve"],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
        cwd=installed.cwd,
        env=installed.env,
    )
    try:
        assert daemon.stderr is not None
        lines = _lines(daemon.stderr)
        _wait_for_line(lines, '"proc.ready"', COMMAND_TIMEOUT_S)
        done = installed.agentd("submit", INSTRUCTION, "--wait")
        assert (done.returncode, done.stdout) == (0, ANSWER), done.stderr
        daemon.send_signal(signal.SIGTERM)
        assert daemon.wait(timeout=STOP_TIMEOUT_S) == 0
        _wait_for_line(lines, '"proc.exit"', STOP_TIMEOUT_S)
    finally:
        if daemon.poll() is None:
            daemon.kill()
            daemon.wait()
