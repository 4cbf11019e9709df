"""`running_daemon`: a real `agentd serve` process on a private socket and state dir, for e2e tests.

The test writes only the TOML it cares about; this adds the socket, the state dir, fast
supervision knobs, and waits (bounded) until the daemon answers `daemon.status`. On exit the
daemon gets SIGTERM and must drain; if it does not exit in time it is killed and the test fails.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

from pydantic import JsonValue

from agentd.api.client import ApiClient
from agentd.errors import ApiClientError
from protocol.api import (
    REQUEST_ADAPTER,
    EventsParams,
    EventsRequest,
    Request,
    StatusRequest,
    SubmitParams,
    SubmitRequest,
    TaskSpec,
    TaskView,
    WaitParams,
    WaitRequest,
)

REPO = Path(__file__).resolve().parents[2]
FIXTURES = REPO / "tests" / "fixtures"
LEAN_SERVER = FIXTURES / "mcp_lean.py"
START_TIMEOUT_S = 30.0

ResultT = TypeVar("ResultT")

FAST_SUPERVISION = """
[supervision]
ping_interval_s = 0.2
missed_pongs = 3
cancel_grace_s = 0.5
term_grace_s = 0.5
kill_reap_s = 2
eof_grace_s = 0.5
orphan_sweep_interval_s = 0.5
"""


@dataclass
class Daemon:
    workdir: Path
    config: Path
    socket: Path
    proc: subprocess.Popen[bytes]
    log_path: Path
    env: dict[str, str] = field(default_factory=dict)

    @property
    def pid(self) -> int:
        return self.proc.pid

    def client(self, timeout_s: float = 30.0) -> ApiClient:
        return ApiClient(self.socket, timeout_s=timeout_s)

    def call(
        self, method: str, params: dict[str, object] | None = None, *, timeout_s: float = 30.0
    ) -> object:
        """Call `method` with plain-JSON `params` (validated as its request); the result as plain JSON."""
        frame = {"jsonrpc": "2.0", "method": method, "params": params or {}}
        request: Request[Any] = REQUEST_ADAPTER.validate_python(frame)
        with self.client(timeout_s) as client:
            return _as_json(request, client.call(request))

    def submit(self, instruction: str, **spec: object) -> str:
        request = SubmitRequest(
            params=SubmitParams(spec=TaskSpec.model_validate({"instruction": instruction, **spec}))
        )
        with self.client() as client:
            return client.call(request).task_id

    def wait(self, task_id: str, timeout_s: float = 60.0) -> TaskView:
        request = WaitRequest(params=WaitParams(task_id=task_id, timeout_s=timeout_s))
        with self.client(timeout_s + 5) as client:
            return client.call(request, timeout_s=timeout_s + 5)

    def events(self, task_id: str) -> list[dict[str, object]]:
        """The task's events so far, each as `agentd logs --json` prints it, read over the socket
        (no CLI process to start: a second of CPU saved per call in the rounds that ask often)."""
        request = EventsRequest(params=EventsParams(task_id=task_id))
        with self.client() as client:
            return [
                item.model_dump(mode="json")
                for item in client.stream(request, idle_timeout_s=30.0)
                if not isinstance(item, TaskView)
            ]

    def wait_ready(self, task_ids: list[str], timeout_s: float = 30.0) -> dict[str, int]:
        """Wait until every task's child has sent `ev/ready`; return their pids."""
        deadline = time.monotonic() + timeout_s
        while True:
            ready = {
                str(line["task_id"]): line["pid"]
                for line in self.log()
                if line.get("event") == "subagent.ready" and line.get("task_id") in task_ids
            }
            if len(ready) == len(task_ids):
                return {t: int(p) for t, p in ready.items()}  # type: ignore[call-overload]
            assert time.monotonic() < deadline, f"children not ready: {ready}"
            time.sleep(0.05)

    def wait_log(self, event: str, timeout_s: float = 30.0, **match: object) -> dict[str, object]:
        """The first log line with this `event` (and these field values), waiting for it (bounded)."""
        deadline = time.monotonic() + timeout_s
        while True:
            for line in self.log():
                if line.get("event") == event and all(line.get(k) == v for k, v in match.items()):
                    return line
            assert time.monotonic() < deadline, f"no {event} {match} in the daemon log within {timeout_s} s"
            assert self.proc.poll() is None, f"daemon exited ({self.proc.returncode}) before logging {event}"
            time.sleep(0.02)

    def cli(self, *args: str, timeout_s: float = 60.0) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [sys.executable, "-m", "agentd", *args, "--socket", str(self.socket)],
            capture_output=True,
            text=True,
            timeout=timeout_s,
            env={**os.environ, **self.env},
        )

    def log(self) -> list[dict[str, object]]:
        lines = []
        for line in self.log_path.read_text(errors="replace").splitlines():
            try:
                lines.append(json.loads(line))
            except ValueError:
                continue
        return lines

    def stop(self, sig: int = signal.SIGTERM, timeout_s: float = 30.0) -> int:
        if self.proc.poll() is None:
            self.proc.send_signal(sig)
        return self.proc.wait(timeout=timeout_s)


def _as_json(request: Request[ResultT], result: ResultT) -> JsonValue:
    value: JsonValue = json.loads(request.dump_result(result))
    return value


def refused_start(config: Path) -> str:
    """Run `agentd serve` with `config`, require it to refuse to start (exit 1) with one
    `proc.exit` log line, and return that line's reason."""
    done = subprocess.run(
        [sys.executable, "-m", "agentd", "serve", "--config", str(config)],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 1, done.stderr[-3000:]
    lines = [json.loads(line) for line in done.stderr.splitlines() if line.startswith("{")]
    (exit_line,) = [line for line in lines if line["event"] == "proc.exit"]
    return str(exit_line["err"])


def write_config(
    workdir: Path, body: str, *, fast: bool = True, daemon: str = "", socket: Path | None = None
) -> Path:
    """Write agentd.toml: the [daemon] table (plus `daemon` lines), then `body`."""
    config = workdir / "agentd.toml"
    socket = socket or workdir / "agentd.sock"
    head = f'[daemon]\nsocket = "{socket}"\nstate_dir = "{workdir / "state"}"\n{daemon}'
    text = head + body
    if fast and "[supervision]" not in body:
        text += FAST_SUPERVISION
    config.write_text(text)
    return config


def start_daemon(
    workdir: Path,
    config: Path,
    env: dict[str, str] | None = None,
    socket: Path | None = None,
    *,
    launcher: Sequence[str] = (),
    wait: bool = True,
    pass_fds: Sequence[int] = (),
) -> Daemon:
    """Start `agentd serve`; with `wait`, return once it answers `daemon.status`.

    `launcher` is a command that execs the daemon's argv (e.g. `systemd-socket-activate -l PATH`
    or `WATCHDOG_PID_WRAPPER`), so the daemon keeps the launcher's pid.
    """
    log_path = workdir / "daemon.log"
    extra = env or {}
    with open(log_path, "ab") as log:  # the child keeps its own copy of the fd
        proc = subprocess.Popen(
            [*launcher, sys.executable, "-m", "agentd", "serve", "--config", str(config)],
            stdout=log,
            stderr=subprocess.STDOUT,
            env={**os.environ, **extra},
            start_new_session=True,
            pass_fds=pass_fds,
        )
    daemon = Daemon(workdir, config, socket or workdir / "agentd.sock", proc, log_path, extra)
    if not wait:
        return daemon
    deadline = time.monotonic() + START_TIMEOUT_S
    while True:
        if proc.poll() is not None:
            raise AssertionError(
                f"daemon exited ({proc.returncode}) during start:\n{log_path.read_text()[-3000:]}"
            )
        try:
            with daemon.client(timeout_s=2) as client:
                client.call(StatusRequest())
            return daemon
        except ApiClientError:
            pass
        if time.monotonic() > deadline:
            proc.kill()
            raise AssertionError(f"daemon did not become ready:\n{log_path.read_text()[-3000:]}")
        time.sleep(0.05)


@contextmanager
def running_daemon(
    workdir: Path,
    body: str,
    *,
    env: dict[str, str] | None = None,
    daemon_lines: str = "",
    socket: Path | None = None,
) -> Iterator[Daemon]:
    config = write_config(workdir, body, daemon=daemon_lines, socket=socket)
    daemon = start_daemon(workdir, config, env, socket)
    try:
        yield daemon
    finally:
        if daemon.proc.poll() is None:
            daemon.proc.send_signal(signal.SIGTERM)
            try:
                code = daemon.proc.wait(timeout=40)
            except subprocess.TimeoutExpired:
                os.killpg(daemon.proc.pid, signal.SIGKILL)
                daemon.proc.wait()
                raise AssertionError("the daemon did not drain within 40 s") from None
            assert code == 0, f"daemon exited {code} on SIGTERM:\n{daemon.log_path.read_text()[-3000:]}"


def scripted(name: str, turns: list[dict[str, object]], workdir: Path, **extra: object) -> str:
    """An [intelligence.<name>] table for a scripted model with these turns."""
    path = workdir / f"{name}.json"
    path.write_text(json.dumps({"model": f"scripted-{name}", "turns": turns, **extra}))
    return f'[intelligence.{name}]\nkind = "scripted"\nscript = "{path}"\n'


def rogue_command() -> str:
    return f'child_command = ["{sys.executable}", "{FIXTURES / "rogue_child.py"}"]\n'


def demo_mcp(name: str = "demo") -> str:
    return f'[mcp.{name}]\ncommand = ["{sys.executable}", "{FIXTURES / "mcp_basic.py"}"]\ntrust = []\n'


def lean_mcp(name: str = "demo") -> str:
    """An [mcp.<name>] table for `mcp_lean.py`: a real stdio server with `mcp_basic.py`'s `add`,
    `echo`, `record` and `slow_record`, started without the SDK's second of CPU — for a test whose
    subject is the daemon, not the MCP SDK's server."""
    return f'[mcp.{name}]\ncommand = ["{sys.executable}", "{LEAN_SERVER}"]\ntrust = []\n'


# Exports its own pid as WATCHDOG_PID, then execs the daemon in place, as systemd does for the
# main process.
WATCHDOG_PID_WRAPPER = ("sh", "-c", 'WATCHDOG_PID=$$ exec "$@"', "sh")


def socket_activation_launcher(fd: int) -> tuple[str, ...]:
    """Hands the listening socket `fd` to the daemon as systemd does: as fd 3, with LISTEN_FDS=1
    and LISTEN_PID = the daemon's pid (this launcher's, which then execs the daemon). Pass `fd` in
    `pass_fds` too."""
    script = (
        "import os, sys\n"
        f"if {fd} != 3:\n    os.dup2({fd}, 3)\n    os.close({fd})\n"
        "os.environ.update(LISTEN_PID=str(os.getpid()), LISTEN_FDS='1')\n"
        "os.execv(sys.argv[1], sys.argv[1:])\n"
    )
    return (sys.executable, "-c", script)


@dataclass(frozen=True)
class Notification:
    fields: dict[str, str]
    received_at: float  # monotonic, when the test read it


class FakeNotifySocket:
    """Stands in for systemd's notify socket: a bound AF_UNIX datagram socket recording every message."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
        self.sock.bind(str(path))
        self.received: list[Notification] = []

    def env(self, watchdog_usec: int | None = None) -> dict[str, str]:
        """The daemon's environment for this socket; pair a watchdog with `WATCHDOG_PID_WRAPPER`."""
        env = {"NOTIFY_SOCKET": str(self.path)}
        if watchdog_usec is not None:
            env["WATCHDOG_USEC"] = str(watchdog_usec)
        return env

    def receive(self, timeout_s: float) -> Notification | None:
        """The next message, or None if none arrives within `timeout_s`."""
        self.sock.settimeout(timeout_s)
        try:
            data = self.sock.recv(65536)
        except TimeoutError:
            return None
        fields = dict(line.split("=", 1) for line in data.decode().splitlines() if "=" in line)
        note = Notification(fields, time.monotonic())
        self.received.append(note)
        return note

    def drain_nowait(self) -> list[Notification]:
        """Every message already queued, without waiting."""
        drained = []
        while (note := self.receive(0.001)) is not None:
            drained.append(note)
        return drained

    def wait_for(self, key: str, timeout_s: float = 30.0) -> Notification:
        """Read messages until one carries `key`; fails the test after `timeout_s`."""
        deadline = time.monotonic() + timeout_s
        while (left := deadline - time.monotonic()) > 0:
            note = self.receive(left)
            if note is not None and key in note.fields:
                return note
        raise AssertionError(f"no {key}= within {timeout_s} s; got {[n.fields for n in self.received]}")

    def key_sequence(self) -> list[str]:
        """Every key received so far, in order (fields of one message in their order)."""
        return [key for note in self.received for key in note.fields]

    def close(self) -> None:
        self.sock.close()
