"""The zygote process over its socket (docs/design.md §10): ready once, then one reply per request.

The test process stands in for the supervisor: it is a child subreaper (tests/conftest.py), so a
subagent the zygote double-forks is reparented to it, exactly as to the daemon.
"""

from __future__ import annotations

import array
import contextlib
import json
import os
import select
import signal
import socket
import subprocess
import sys
from collections.abc import Iterator

import pytest

from protocol.environment import SUPERVISOR_PID_ENV
from protocol.framing import FrameError, decode
from protocol.zygote import (
    FROM_ZYGOTE_ADAPTER,
    MAX_REPLY,
    Fork,
    Forked,
    ForkFailed,
    FromZygote,
    Ready,
    encode,
)
from subagent.zygote import REPARENT_TIMEOUT_S

pytestmark = pytest.mark.processes

READY_TIMEOUT_S = 60.0  # the zygote imports the whole subagent stack first
STEP_TIMEOUT_S = 15.0


def _wait_readable(fd: int, timeout_s: float = STEP_TIMEOUT_S) -> None:
    ready, _, _ = select.select([fd], [], [], timeout_s)
    assert ready, f"fd {fd} did not become readable within {timeout_s} s"


def _wait_exit(pid: int, timeout_s: float = STEP_TIMEOUT_S) -> int:
    pidfd = os.pidfd_open(pid)
    try:
        _wait_readable(pidfd, timeout_s)
    finally:
        os.close(pidfd)
    _, status = os.waitpid(pid, 0)
    return os.waitstatus_to_exitcode(status)


@contextlib.contextmanager
def running_zygote() -> Iterator[socket.socket]:
    """Start `python -I -m subagent.zygote` with its socket on fd 3; yield our end once it is ready."""
    ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
    env = {k: os.environ[k] for k in ("PATH", "HOME") if k in os.environ}
    env[SUPERVISOR_PID_ENV] = str(os.getpid())
    argv = [sys.executable, "-I", "-m", "subagent.zygote"]
    try:
        pid = os.posix_spawn(argv[0], argv, env, file_actions=[(os.POSIX_SPAWN_DUP2, theirs.fileno(), 3)])
    finally:
        theirs.close()
    try:
        _wait_readable(ours.fileno(), READY_TIMEOUT_S)
        assert isinstance(_receive(ours), Ready)
        yield ours
        ours.close()  # EOF on its socket is the zygote's signal to exit
        assert _wait_exit(pid) == 0
    finally:
        ours.close()
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)
        with contextlib.suppress(ChildProcessError):
            os.waitpid(pid, 0)


def _run_script(script: str, *args: str) -> subprocess.CompletedProcess[str]:
    """Run `script` in a fresh interpreter started as the zygote is (`-I`); it must exit 0."""
    env = {k: os.environ[k] for k in ("PATH", "HOME") if k in os.environ}
    done = subprocess.run(
        [sys.executable, "-I", "-c", script, *args],
        env=env,
        capture_output=True,
        text=True,
        timeout=READY_TIMEOUT_S,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    return done


def _send(sock: socket.socket, datagram: bytes, fds: list[int]) -> None:
    rights = array.array("i", fds).tobytes()
    sock.sendmsg([datagram], [(socket.SOL_SOCKET, socket.SCM_RIGHTS, rights)])


def _receive(sock: socket.socket) -> FromZygote:
    _wait_readable(sock.fileno())
    message = decode(sock.recv(MAX_REPLY), FROM_ZYGOTE_ADAPTER, max_line=MAX_REPLY)
    assert not isinstance(message, FrameError), f"the zygote sent an unreadable message: {message}"
    return message


def _assert_closed_by_the_zygote(read_end: int) -> None:
    """Our copies of the write end are closed: EOF means the zygote closed the copies it was sent."""
    _wait_readable(read_end)
    assert os.read(read_end, 1) == b""
    os.close(read_end)


@pytest.mark.parametrize(
    ("datagram", "error"),
    [
        pytest.param(b"not json", "unreadable request: json", id="not-json"),
        pytest.param(
            b'{"type":"fork","id":1,"env":{},"extra":1}', "unreadable request: shape", id="extra-field"
        ),
        pytest.param(b'{"type":"ready","pid":1}', "unreadable request: shape", id="wrong-direction"),
    ],
)
def test_the_zygote_refuses_a_malformed_request_closes_its_fds_and_keeps_forking(
    datagram: bytes, error: str
) -> None:
    with running_zygote() as sock:
        read_end, write_end = os.pipe()
        _send(sock, datagram, [write_end] * 3)
        os.close(write_end)
        refusal = _receive(sock)
        assert isinstance(refusal, ForkFailed)
        assert refusal.id is None
        assert refusal.error.startswith(error)
        _assert_closed_by_the_zygote(read_end)

        in_r, in_w = os.pipe()
        err_r, err_w = os.pipe()
        _send(sock, encode(Fork(id=1, env={SUPERVISOR_PID_ENV: str(os.getpid())})), [in_r, err_w, err_w])
        for fd in (in_r, err_w):
            os.close(fd)
        forked = _receive(sock)
        assert isinstance(forked, Forked)
        assert forked.id == 1
        # The subagent boots and waits for its spawn frame; EOF instead makes it exit 2.
        os.close(in_w)
        assert _wait_exit(forked.pid) == 2  # our child: reparented to the stand-in supervisor
        with os.fdopen(err_r, "rb") as stderr:
            assert b"no spawn payload" in stderr.read()


def test_a_fork_request_without_three_fds_is_refused_by_its_id() -> None:
    with running_zygote() as sock:
        read_end, write_end = os.pipe()
        _send(sock, encode(Fork(id=7, env={})), [write_end])
        os.close(write_end)
        refusal = _receive(sock)
        assert refusal == ForkFailed(id=7, error="ValueError: a request needs three fds")
        _assert_closed_by_the_zygote(read_end)


def test_requests_queued_together_are_forked_as_one_batch_and_answered_in_order() -> None:
    """Twelve requests sent back to back (more than one batch), one of them malformed: each gets
    its own reply in order, and every subagent is reparented to the supervisor."""
    with running_zygote() as sock:
        stdin_writers: list[int] = []
        sent: list[int] = []
        for n in range(1, 13):
            if n == 6:
                read_end, write_end = os.pipe()
                _send(sock, b"not json", [write_end] * 3)
                os.close(write_end)
                os.close(read_end)
                sent.append(-1)
                continue
            in_r, in_w = os.pipe()
            null = os.open(os.devnull, os.O_WRONLY)
            _send(sock, encode(Fork(id=n, env={SUPERVISOR_PID_ENV: str(os.getpid())})), [in_r, null, null])
            os.close(in_r)
            os.close(null)
            stdin_writers.append(in_w)
            sent.append(n)
        replies = [_receive(sock) for _ in sent]
        assert [r.id if isinstance(r, Forked) else -1 for r in replies] == sent
        refusal = replies[5]  # the sixth
        assert isinstance(refusal, ForkFailed) and refusal.error.startswith("unreadable request: json")
        pids = [r.pid for r in replies if isinstance(r, Forked)]
        assert len(set(pids)) == 11
        for fd in stdin_writers:
            os.close(fd)  # EOF instead of a spawn frame: each subagent exits 2
        assert [_wait_exit(pid) for pid in pids] == [2] * 11  # our children: reparented to us


def test_a_subagent_reparented_to_anyone_but_its_supervisor_ends_at_once() -> None:
    """The supervisor died while the intermediate was forking (kill -9 of the daemon mid-batch): the
    subagent is reparented elsewhere (here to this test, a subreaper not named as its supervisor)
    and ends at once with a failure, not after spinning for the whole reparent timeout."""
    with running_zygote() as sock:
        in_r, in_w = os.pipe()
        null = os.open(os.devnull, os.O_WRONLY)
        gone_supervisor = os.getppid()  # any live pid but ours will do
        _send(sock, encode(Fork(id=1, env={SUPERVISOR_PID_ENV: str(gone_supervisor)})), [in_r, null, null])
        os.close(in_r)
        os.close(null)
        reply = _receive(sock)
        assert isinstance(reply, Forked)
        try:
            assert _wait_exit(reply.pid, timeout_s=REPARENT_TIMEOUT_S / 3) == 1
        finally:
            os.close(in_w)


# Run in a fresh interpreter started like the zygote: warm exactly as it does (which reports any
# warm-up run that did not complete on stderr), then fork a child, as the zygote forks subagents,
# that builds both OAuth client-credentials providers and signs a private_key_jwt assertion.
LAZY_OAUTH_SCRIPT = """
import gc, os, sys
import anyio
from subagent import zygote
zygote._warm_imports()
gc.collect()
gc.freeze()
held = sorted({m.split(".")[0] for m in sys.modules} & {"jwt"})
print("held:" + ",".join(held), flush=True)
pid = os.fork()
if pid == 0:
    from cryptography.hazmat.primitives import serialization
    from cryptography.hazmat.primitives.asymmetric import rsa
    from protocol.spawn import McpServerSpec, OAuthSpec
    from subagent.tools.http import oauth_auth
    key = rsa.generate_private_key(public_exponent=65537, key_size=2048).private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
    ).decode()
    url = "https://mcp.example/mcp"
    secret = oauth_auth(McpServerSpec(name="s", transport="http", url=url,
                                      oauth=OAuthSpec(client_id="c", client_secret="x")))
    signed = oauth_auth(McpServerSpec(name="j", transport="http", url=url,
                                      oauth=OAuthSpec(method="private_key_jwt", client_id="c", private_key=key)))
    assertion = anyio.run(signed._assertion_provider, "https://auth.example")
    import jwt
    claims = jwt.decode(assertion, options={"verify_signature": False})
    print(type(secret).__name__, type(signed).__name__, claims["iss"], claims["aud"], flush=True)
    os._exit(0)
_, status = os.waitpid(pid, 0)
sys.exit(os.waitstatus_to_exitcode(status))
"""


def test_oauth_client_credentials_are_imported_by_the_forked_task_that_needs_them_not_by_the_zygote() -> None:
    done = _run_script(LAZY_OAUTH_SCRIPT)
    lines = done.stdout.splitlines()
    assert lines[0] == "held:"  # the zygote's state holds no PyJWT
    assert lines[1] == "ClientCredentialsOAuthProvider PrivateKeyJWTOAuthProvider c https://auth.example"
    assert "warm-up run" not in done.stderr  # every model kind's warm-up task completed


def test_the_zygote_warms_a_task_on_every_model_kind() -> None:
    """Each warm-up task — scripted, and the two HTTP adapters against the loopback model — ends
    `completed`, so the HTTP path really is built before the first fork."""
    script = "import json; from subagent import zygote; print(json.dumps(zygote._warm_run()))"
    done = _run_script(script)
    assert json.loads(done.stdout) == {
        "scripted": "completed",
        "openai": "completed",
        "anthropic": "completed",
    }
    assert done.stderr == ""


# Functions a one-turn task calls once: one warm-up round called each fewer than 8 times (3.11's
# quickening threshold), so a child that reached 8 rewrote their bytecode on its own pages.
ONCE_PER_TASK = (
    "subagent.channel.ControlChannel.__init__",
    "subagent.intel.openai.OpenAIChat.prepare",
    "subagent.intel.anthropic.AnthropicMessages.prepare",
    "protocol.result.distill",
)
QUICKENED_SCRIPT = """
import dis, importlib, json, sys
from subagent import zygote
zygote._warm_run()
def first_op(path):
    parts = path.split(".")
    for cut in range(len(parts) - 1, 0, -1):
        try:
            obj = importlib.import_module(".".join(parts[:cut]))
        except ImportError:
            continue
        for attr in parts[cut:]:
            obj = getattr(obj, attr)
        return next(dis.get_instructions(obj, adaptive=True)).opname
print(json.dumps({path: first_op(path) for path in sys.argv[1:]}))
"""


@pytest.mark.skipif(sys.version_info[:2] != (3, 11), reason="3.11's warm-up counter and RESUME_QUICK")
def test_the_warm_up_quickens_what_a_task_calls_once_so_no_child_rewrites_its_bytecode() -> None:
    done = _run_script(QUICKENED_SCRIPT, *ONCE_PER_TASK)
    assert json.loads(done.stdout) == dict.fromkeys(ONCE_PER_TASK, "RESUME_QUICK")


def test_a_warm_up_kind_that_does_not_complete_is_not_run_again(monkeypatch: pytest.MonkeyPatch) -> None:
    """Rounds repeat only the kinds that completed: a warm-up that times out (a proxy swallowing
    loopback) costs its bound once, not once per round."""
    from subagent import zygote

    calls: list[str] = []

    def one(kind: str, tmp: str) -> str:
        calls.append(kind)
        return "failed: TimeoutError()" if kind == "openai" else "completed"

    monkeypatch.setattr(zygote, "_warm_one", one)
    assert zygote._warm_run() == {
        "scripted": "completed",
        "openai": "failed: TimeoutError()",
        "anthropic": "completed",
    }
    assert calls.count("openai") == 1
    # the first round, the one recorded for packing, the one that quickens the packed copies
    assert calls.count("scripted") == calls.count("anthropic") == 3


# A zygote the supervisor put under SCHED_BATCH warms up under SCHED_OTHER and forks under BATCH.
SCHEDULING_SCRIPT = """
import json, os
from subagent import zygote
os.sched_setscheduler(0, os.SCHED_BATCH, os.sched_param(0))
seen = []
zygote._warm_one = lambda kind, tmp: seen.append(os.sched_getscheduler(0)) or "completed"
zygote._warm_run()
names = {os.SCHED_BATCH: "batch", os.SCHED_OTHER: "other"}
print(json.dumps({"during": sorted({names[p] for p in seen}), "after": names[os.sched_getscheduler(0)]}))
"""


def test_a_batch_zygote_warms_up_under_normal_scheduling_and_forks_under_batch() -> None:
    done = _run_script(SCHEDULING_SCRIPT)
    assert json.loads(done.stdout) == {"during": ["other"], "after": "batch"}


# Run in a fresh interpreter standing in for the zygote: fork three subagents whose stdin is closed
# at once (each ends with exit code 2, "no spawn frame"), either way the zygote can fork them.
FORK_SCRIPT = """
import ctypes, json, os, sys
from protocol.environment import SUPERVISOR_PID_ENV
from subagent import zygote
double = sys.argv[1] == "double"
zygote._clone_refused = double
if double:  # the script plays the supervisor: a subreaper, as the daemon is
    assert ctypes.CDLL(None, use_errno=True).prctl(36, 1, 0, 0, 0) == 0  # PR_SET_CHILD_SUBREAPER
supervisor = os.getpid() if double else os.getppid()
null = os.open(os.devnull, os.O_WRONLY)
batch, writers = [], []
for _ in range(3):
    r, w = os.pipe()
    batch.append(({SUPERVISOR_PID_ENV: str(supervisor)}, [r, null, null]))
    writers.append(w)
pids = zygote.fork_subagents(batch)
for fd in writers:
    os.close(fd)
codes = [os.waitstatus_to_exitcode(os.waitpid(p, 0)[1]) for p in pids] if double else []
print(json.dumps({"pids": pids, "codes": codes, "refused": zygote._clone_refused}), flush=True)
"""


@pytest.mark.parametrize("how", ["clone", "double"])
def test_subagents_are_the_supervisors_children_whether_cloned_or_double_forked(how: str) -> None:
    """Cloned with CLONE_PARENT, a subagent is the supervisor's child from birth (here the supervisor
    is this test, the parent of the process that forks); where the kernel refuses that, the double
    fork makes it the supervisor's child by reparenting (here the script is the subreaper)."""
    done = _run_script(FORK_SCRIPT, how)
    report = json.loads(done.stdout)
    pids = report["pids"]
    assert len(pids) == 3 and all(isinstance(pid, int) for pid in pids), report
    assert report["refused"] is (how == "double")
    if how == "clone":
        # Our own children: waitpid works here, and nobody else could reap them.
        assert [_wait_exit(pid) for pid in pids] == [2, 2, 2]
    else:
        assert report["codes"] == [2, 2, 2]
