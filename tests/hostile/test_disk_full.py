"""A full disk at the API: the real daemon's state directory sits on a small tmpfs.

Once the tmpfs is full, a submit is refused with a retryable `UNAVAILABLE`, never acknowledged
without its commit; `daemon.status` and systemd's `STATUS=` say the daemon is degraded while reads
keep working; when space returns, submits commit again and the degraded state clears. Every task
that was acknowledged is still there after a restart, and none that was refused is. Needs root
(`mount -t tmpfs`).
"""

from __future__ import annotations

import contextlib
import errno
import os
import subprocess
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from agentd.errors import ApiClientError
from protocol.api import UNAVAILABLE, SubmitParams, SubmitRequest, TaskSpec
from tests.support.daemon import Daemon, FakeNotifySocket, rogue_command, scripted, start_daemon, write_config

pytestmark = [
    pytest.mark.processes,
    pytest.mark.skipif(os.geteuid() != 0, reason="needs root to mount a tmpfs"),
]

TMPFS_SIZE = "4m"
INSTRUCTION_BYTES = 64 * 1024  # a few dozen fill what the filler leaves
MAX_SUBMITS = 200


@contextlib.contextmanager
def small_tmpfs(path: Path) -> Iterator[Path]:
    path.mkdir(mode=0o700)
    mounted = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", f"size={TMPFS_SIZE},mode=0700", "tmpfs", str(path)],
        capture_output=True,
        text=True,
        timeout=30,
    )
    if mounted.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here: {mounted.stderr.strip()}")
    try:
        yield path
    finally:
        subprocess.run(["umount", "-l", str(path)], check=True, timeout=30)


def fill(directory: Path) -> Path:
    """Write a file until the filesystem is full; return it (deleting it gives the space back)."""
    filler = directory / "filler"
    block = b"\0" * 65536
    with open(filler, "wb", buffering=0) as out:
        failure: OSError | None = None
        while failure is None:
            try:
                out.write(block)
            except OSError as exc:
                failure = exc
        assert failure.errno == errno.ENOSPC, failure
        # Whatever is left is smaller than a block: take it in smaller writes.
        for size in (4096, 512, 1):
            while True:
                try:
                    out.write(b"\0" * size)
                except OSError:
                    break
    return filler


def submit(daemon: Daemon, key: str) -> str | ApiClientError:
    spec = TaskSpec(instruction="idle " + "x" * INSTRUCTION_BYTES)
    request = SubmitRequest(params=SubmitParams(spec=spec, idempotency_key=key))
    try:
        with daemon.client() as client:
            return client.call(request).task_id
    except ApiClientError as exc:
        return exc


def status(daemon: Daemon) -> dict[str, object]:
    view = daemon.call("daemon.status")
    assert isinstance(view, dict)
    return view


def test_a_full_state_directory_refuses_submits_retryably_and_recovers(tmp_path: Path) -> None:
    # The rogue stand-in idles: the first task holds the one slot, the rest stay queued.
    body = (
        scripted("m", [{"text": "unused"}], tmp_path)
        + '[defaults]\nmodel = "m"\n'
        + "[supervision]\n"
        + rogue_command()
    )
    config = write_config(
        tmp_path, body, daemon='max_concurrent_tasks = 1\nmax_queued_per_uid = "infinity"\n'
    )
    notify = FakeNotifySocket(tmp_path / "notify.sock")
    acked: dict[str, str] = {}
    refused: list[str] = []
    with small_tmpfs(tmp_path / "state") as state:
        daemon = start_daemon(tmp_path, config, notify.env())
        try:
            notify.wait_for("READY")
            acked["before"] = str(submit(daemon, "before"))
            notify.drain_nowait()
            since_full = len(notify.received)
            filler = fill(state)
            for n in range(MAX_SUBMITS):
                outcome = submit(daemon, f"full-{n}")
                if isinstance(outcome, ApiClientError):
                    assert outcome.code == UNAVAILABLE, outcome
                    assert outcome.retryable, outcome
                    assert "the task was not accepted" in outcome.message, outcome
                    refused.append(f"full-{n}")
                    if len(refused) >= 3:
                        break
                else:
                    acked[f"full-{n}"] = outcome  # the WAL still had room: committed, then acked
            assert len(refused) >= 3, f"the journal never filled its {TMPFS_SIZE} tmpfs"

            degraded = status(daemon)
            assert degraded["journal_ok"] is False
            problems = degraded["degraded"]
            assert isinstance(problems, list) and any("full" in str(d) for d in problems), degraded
            line = _wait_status(notify, lambda text: "degraded: journal failing" in text, since_full)
            assert "full" in line
            # Reads keep working while writes fail.
            listed = daemon.call("task.list", {"limit": 1000})
            assert isinstance(listed, list)
            assert {t["task_id"] for t in listed} == set(acked.values())

            since_degraded = len(notify.received)
            filler.unlink()  # space returns
            again = submit(daemon, refused[0])
            assert isinstance(again, str), again
            acked[refused[0]] = again
            healthy = status(daemon)
            assert healthy["journal_ok"] is True and healthy["degraded"] == [], healthy
            _wait_status(notify, lambda text: "degraded" not in text, since_degraded)
        finally:
            code = daemon.stop()
            notify.close()
        assert code == 0, daemon.log_path.read_text()[-3000:]

        # After a restart: every acknowledged task is there; no refused one was stored.
        daemon = start_daemon(tmp_path, config)
        try:
            listed = daemon.call("task.list", {"limit": 1000})
            assert isinstance(listed, list)
            assert {t["task_id"] for t in listed} == set(acked.values())
            for key in refused[1:]:
                created = daemon.call(
                    "task.submit", {"spec": {"instruction": "idle"}, "idempotency_key": key}
                )
                assert isinstance(created, dict) and created["created"] is True, key
        finally:
            assert daemon.stop() == 0
    print(f"disk full: {len(acked)} acknowledged, {len(refused)} refused (retryable), all acked kept")


def _wait_status(
    notify: FakeNotifySocket, matches: Callable[[str], bool], since: int, timeout_s: float = 15.0
) -> str:
    """The first `STATUS=` line sent after the first `since` messages that `matches`, waiting
    (bounded) for it."""
    for note in notify.received[since:]:
        if "STATUS" in note.fields and matches(note.fields["STATUS"]):
            return note.fields["STATUS"]
    while True:
        note = notify.wait_for("STATUS", timeout_s=timeout_s)
        if matches(note.fields["STATUS"]):
            return note.fields["STATUS"]
