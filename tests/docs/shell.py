"""Run the commands of a markdown document as written: its code blocks, its shell lines.

A doc's `.venv/bin/agentd` (or `agentd`) is this interpreter running `-m agentd`, and `.venv/bin/python` is this
interpreter (the venv the README installs is the one running the tests). Every command runs in a
private runtime, state and config directory, so the daemon it finds is the one the doc started,
on the embedded defaults unless the doc gives `--config`. Background commands (`… &`) are stopped
by pid when the shell closes: SIGTERM, then SIGKILL of their process group past a bound.
"""

from __future__ import annotations

import os
import re
import shlex
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

from agentd.api.client import ApiClient
from agentd.errors import ApiClientError
from protocol.api import StatusRequest

REPO = Path(__file__).resolve().parents[2]
RUN_TIMEOUT_S = 60.0
STOP_TIMEOUT_S = 30.0
PROGRAMS = {
    ".venv/bin/agentd": [sys.executable, "-m", "agentd"],
    "agentd": [sys.executable, "-m", "agentd"],  # on PATH: the venv activated
    ".venv/bin/python": [sys.executable],
}


def section(path: Path, heading: str) -> str:
    """The text under `heading` (a whole markdown heading line) up to the next heading of its level
    or above (a `#` line inside a code block is not a heading)."""
    level = len(heading.split(" ", 1)[0])
    lines = path.read_text().splitlines(keepends=True)
    start = lines.index(heading + "\n") + 1
    fenced = False
    for end in range(start, len(lines)):
        line = lines[end]
        fenced ^= line.startswith("```")
        hashes = len(line) - len(line.lstrip("#"))
        if not fenced and 0 < hashes <= level and line[hashes : hashes + 1] == " ":
            return "".join(lines[start:end])
    return "".join(lines[start:])


def blocks(text: str, language: str) -> list[str]:
    found: list[str] = re.findall(rf"```{language}\n(.*?)```", text, flags=re.DOTALL)
    return found


@dataclass(frozen=True)
class Line:
    """One shell line of a doc: its words (comments and `[optional]` words left out), and whether
    it runs in the background."""

    text: str
    argv: list[str]
    background: bool


def shell_lines(block: str) -> list[Line]:
    out = []
    for text in block.replace("\\\n", " ").splitlines():
        words = shlex.split(text, comments=True)
        if not words:
            continue
        background = words[-1] == "&"
        words = [w for w in (words[:-1] if background else words) if not re.fullmatch(r"\[.*\]", w)]
        out.append(Line(text.strip(), words, background))
    return out


@dataclass
class DocShell:
    cwd: Path
    env: dict[str, str]
    background: list[subprocess.Popen[bytes]] = field(default_factory=list)
    logs: Path | None = None

    @property
    def socket(self) -> Path:
        return Path(self.env["XDG_RUNTIME_DIR"]) / "agentd" / "agentd.sock"

    def argv(self, words: list[str]) -> list[str]:
        program = PROGRAMS.get(words[0])
        assert program is not None, f"a doc command runs {words[0]!r}, which the docs' install does not give"
        return [*program, *words[1:]]

    def run(self, words: list[str], timeout_s: float = RUN_TIMEOUT_S) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            self.argv(words), cwd=self.cwd, env=self.env, capture_output=True, text=True, timeout=timeout_s
        )

    def start(self, words: list[str]) -> subprocess.Popen[bytes]:
        assert self.logs is not None
        with open(self.logs / f"bg-{len(self.background)}.log", "wb") as log:
            proc = subprocess.Popen(
                self.argv(words),
                cwd=self.cwd,
                env=self.env,
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
        self.background.append(proc)
        return proc

    def wait_ready(self, daemon: subprocess.Popen[bytes]) -> None:
        """Until the daemon the doc started answers on the socket every client finds."""

        def answers() -> bool:
            assert daemon.poll() is None, f"the daemon exited during its start:\n{self.log_of(daemon)}"
            try:
                with ApiClient(self.socket, timeout_s=2) as client:
                    client.call(StatusRequest())
            except ApiClientError:
                return False
            return True

        until(answers, "the daemon to answer", timeout_s=30)

    def log_of(self, proc: subprocess.Popen[bytes]) -> str:
        assert self.logs is not None
        return (self.logs / f"bg-{self.background.index(proc)}.log").read_text(errors="replace")[-3000:]

    def stop(self, proc: subprocess.Popen[bytes]) -> int:
        """SIGTERM, then SIGKILL of its group past the bound (and the test fails)."""
        if proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
        try:
            return proc.wait(timeout=STOP_TIMEOUT_S)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
            raise AssertionError(f"{proc.args!r} did not stop within {STOP_TIMEOUT_S} s") from None


def until(check: Callable[[], object], what: str, timeout_s: float = RUN_TIMEOUT_S) -> object:
    deadline = time.monotonic() + timeout_s
    while True:
        value = check()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout_s} s waiting for {what}")
        time.sleep(0.1)


@contextmanager
def doc_shell(cwd: Path) -> Iterator[DocShell]:
    """A shell for a doc's commands: private XDG directories (a short runtime path: the socket's
    path must fit in 108 bytes); background commands stopped, in reverse order, on the way out."""
    with tempfile.TemporaryDirectory(prefix="agentd-doc-", dir="/tmp") as tmp:
        root = Path(tmp)
        for name in ("home", "run", "state", "config", "logs"):
            (root / name).mkdir(mode=0o700)
        env = {
            k: v
            for k, v in os.environ.items()
            if not k.startswith(("AGENTD_", "XDG_", "NOTIFY_SOCKET", "RUNTIME_DIRECTORY", "STATE_DIRECTORY"))
        }
        env.update(
            HOME=str(root / "home"),
            XDG_RUNTIME_DIR=str(root / "run"),
            XDG_STATE_HOME=str(root / "state"),
            XDG_CONFIG_HOME=str(root / "config"),
            COLUMNS="100",
        )
        shell = DocShell(cwd, env, logs=root / "logs")
        try:
            yield shell
        finally:
            for proc in reversed(shell.background):
                shell.stop(proc)
