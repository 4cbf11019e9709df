"""The npm reference MCP servers (`server-everything`, `server-memory`, `server-filesystem`).

`scripts/check` installs them on its first run, pinned by `tests/npm/package-lock.json`, with
`npm ci --prefix tests/npm`. Tests that use them are skipped, naming the missing Debian package,
only when `node` or `npm` is absent; a machine with both but without the install fails loudly
with the command to run.
"""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import IO

import pytest

REPO = Path(__file__).resolve().parent.parent.parent
NPM_PREFIX = REPO / "tests" / "npm"
PACKAGES = NPM_PREFIX / "node_modules" / "@modelcontextprotocol"
INSTALL = f"npm ci --prefix {NPM_PREFIX}"


def node() -> str:
    found = shutil.which("node")
    if found is None:
        pytest.skip("node is not installed (Debian package `nodejs`): the npm MCP servers cannot run")
    return found


def require_install(what: str, *paths: Path) -> None:
    """Skip when npm is absent (nothing could install them); fail, naming the command, otherwise."""
    if all(path.is_file() for path in paths):
        return
    if shutil.which("npm") is None:
        pytest.skip(f"{what} is not installed and npm is absent (Debian package `npm`)")
    pytest.fail(f"{what} is not installed under {NPM_PREFIX}; run `{INSTALL}` (scripts/check does)")


def server_script(package: str) -> Path:
    """The entry script of `@modelcontextprotocol/<package>` (e.g. `server-everything`)."""
    node()
    script = PACKAGES / package / "dist" / "index.js"
    require_install(package, script)
    return script


def everything_argv(transport: str = "stdio") -> list[str]:
    return [node(), str(server_script("server-everything")), transport]


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


class Lines:
    """Every line a pipe yields, collected by a thread, so a test can wait (bounded) for one."""

    def __init__(self, pipe: IO[str]) -> None:
        self.lines: list[str] = []
        self._changed = threading.Condition()
        self._thread = threading.Thread(target=self._pump, args=(pipe,), daemon=True)
        self._thread.start()

    def _pump(self, pipe: IO[str]) -> None:
        with pipe:
            for line in pipe:
                with self._changed:
                    self.lines.append(line.rstrip("\n"))
                    self._changed.notify_all()

    def join(self) -> None:
        """Wait (bounded) for the pipe's end: call after the writer exited."""
        self._thread.join(timeout=5)

    def wait_for(self, text: str, *, timeout_s: float = 20.0) -> str:
        with self._changed:
            found = self._changed.wait_for(
                lambda: next((line for line in self.lines if text in line), None), timeout=timeout_s
            )
        if found is None:
            pytest.fail(f"no line containing {text!r} within {timeout_s:g} s; got {self.lines[-20:]}")
        return found

    def count(self, text: str) -> int:
        with self._changed:
            return sum(text in line for line in self.lines)


@contextmanager
def everything_over_http(transport: str, port: int | None = None) -> Iterator[tuple[int, Lines]]:
    """server-everything serving `streamableHttp` (`/mcp`) or `sse` (`/sse`) on a loopback port.

    Yields once it listens, with its stdout lines (it logs each request there).
    """
    port = port or free_port()
    env = {**os.environ, "PORT": str(port)}
    process = subprocess.Popen(
        everything_argv(transport), env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )
    assert process.stdout is not None and process.stderr is not None
    stdout, stderr = Lines(process.stdout), Lines(process.stderr)
    try:
        stderr.wait_for(" port ")
        yield port, stdout
    finally:
        process.terminate()
        try:
            process.wait(10)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait(5)
        stdout.join()
        stderr.join()
