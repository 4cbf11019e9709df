"""The real subagent under the real daemon, talking to `FakeLLM`: first request and cancel latency.

Submit → first model request: one task at a time, from the client's `task.submit` to the fake
model recording the request (one monotonic clock: the fake runs in this process), i.e. intake,
scheduling, the spawn (zygote fork, or exec) and the child's boot. Cancel → `cancelled` recorded: tasks whose
model call hangs, cancelled one at a time while their siblings idle; from sending `task.cancel`
to a `task.wait` already waiting on a second connection returning the terminal task (the daemon
answers it after the terminal COMMIT).
"""

from __future__ import annotations

import json
import socket
import statistics
import threading
import time
from dataclasses import dataclass
from datetime import UTC, datetime

from pydantic import JsonValue

from agentd.api.client import ApiClient
from bench.daemon_procs import BenchDaemon
from bench.samples import Summary, summarize
from protocol.api import (
    CancelParams,
    CancelRequest,
    EventsParams,
    EventsRequest,
    EventView,
    StatusRequest,
    SubmitParams,
    SubmitRequest,
    TaskSpec,
    TaskView,
    WaitParams,
    WaitRequest,
)
from protocol.framing import encode
from tests.support.fake_llm import FakeLLM

BOOT_TIMEOUT_S = 120.0
WAIT_TIMEOUT_S = 60.0


def endpoints_toml(quick: FakeLLM, hang: FakeLLM) -> str:
    """Two intelligence endpoints: `quick` answers at once, `hang` never answers."""
    return (
        f'[intelligence.quick]\nkind = "openai"\nbase_url = "{quick.base_url}"\nmodel = "m"\n'
        f'[intelligence.hang]\nkind = "openai"\nbase_url = "{hang.base_url}"\nmodel = "m"\n'
        '[defaults]\nmodel = "quick"\n'
    )


@dataclass(frozen=True, slots=True)
class FirstRequestResult:
    samples: int
    submit_to_request: Summary
    submit_ack: Summary
    queued: Summary  # submit committed → marked `starting` (journal timestamps)
    spawn_to_ready: Summary  # the daemon's `subagent.ready` dur_ms
    warmup_ms: float  # the first, discarded sample


@dataclass(frozen=True, slots=True)
class CancelResult:
    samples: int
    batch: int
    cancel_to_terminal: Summary
    cancel_ack: Summary
    statuses: dict[str, int]
    ended_by_rung: dict[str, int]  # the highest kill-ladder rung each cancel needed
    # Medians from the daemon's log (millisecond timestamps): where the time goes.
    breakdown_ms: dict[str, float]


def wait_zygote(daemon: BenchDaemon, timeout_s: float = BOOT_TIMEOUT_S) -> None:
    """Wait until the daemon's zygote is ready (before that, spawns fall back to exec)."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        for line in daemon.daemon.log():
            if line.get("event") == "proc.ready" and line.get("process") == "zygote":
                return
        time.sleep(0.05)
    raise RuntimeError("the zygote did not become ready")


def _submit(api: ApiClient, instruction: str, model: str) -> str:
    spec = TaskSpec(instruction=instruction, model=model)
    return api.call(SubmitRequest(params=SubmitParams(spec=spec))).task_id


def _wait(api: ApiClient, task_id: str, timeout_s: float = WAIT_TIMEOUT_S) -> TaskView:
    request = WaitRequest(params=WaitParams(task_id=task_id, timeout_s=timeout_s))
    return api.call(request, timeout_s=timeout_s + 5)


def _events(api: ApiClient, task_id: str) -> list[dict[str, JsonValue]]:
    events: list[dict[str, JsonValue]] = []
    for item in api.stream(EventsRequest(params=EventsParams(task_id=task_id)), idle_timeout_s=30):
        if isinstance(item, EventView):
            events.append({"event": item.event, **item.fields})
    return events


def measure_first_request(daemon: BenchDaemon, quick: FakeLLM, samples: int) -> FirstRequestResult:
    to_request: list[float] = []
    acks: list[float] = []
    queued: list[float] = []
    ready: list[float] = []
    warmup_ms = float("nan")
    with ApiClient(daemon.socket, timeout_s=30) as api:
        for index in range(samples + 1):
            seen = len(quick.requests)
            started = time.monotonic()
            task_id = _submit(api, f"reply with one word ({index})", "quick")
            acked = time.monotonic()
            request = quick.wait_requests_blocking(seen + 1, timeout_s=BOOT_TIMEOUT_S)[seen]
            view = _wait(api, task_id)
            if view.status is None or view.status.value != "completed":
                raise RuntimeError(f"first-request task ended {view.status}: {view.error}")
            if index == 0:
                warmup_ms = round((request.at - started) * 1000, 1)
                continue
            to_request.append(request.at - started)
            acks.append(acked - started)
            if view.started_at is not None:
                queued.append(view.started_at - view.created_at)
            for event in _events(api, task_id):
                duration = event.get("dur_ms")
                if event["event"] == "subagent.ready" and isinstance(duration, int | float):
                    ready.append(duration / 1000)
    return FirstRequestResult(
        samples=samples,
        submit_to_request=summarize(to_request),
        submit_ack=summarize(acks),
        queued=summarize(queued),
        spawn_to_ready=summarize(ready),
        warmup_ms=warmup_ms,
    )


def _running(api: ApiClient) -> int:
    return api.call(StatusRequest()).running


def measure_cancel(daemon: BenchDaemon, hang: FakeLLM, samples: int, batch: int) -> CancelResult:
    latencies: list[float] = []
    acks: list[float] = []
    statuses: dict[str, int] = {}
    rungs: dict[str, int] = {}
    cancelled: list[str] = []
    with (
        ApiClient(daemon.socket, timeout_s=30) as api,
        socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as waiter,
    ):
        waiter.connect(str(daemon.socket))
        done = 0
        while done < samples:
            size = min(batch, samples - done)
            seen = len(hang.requests)
            task_ids = [_submit(api, f"wait for the model ({done + i})", "hang") for i in range(size)]
            cancelled += task_ids
            # Every child of the batch is now inside a model call that will never return.
            hang.wait_requests_blocking(seen + size, timeout_s=BOOT_TIMEOUT_S)
            for left, task_id in enumerate(task_ids, start=1):
                latency, ack, view = _cancel_one(api, waiter, task_id)
                latencies.append(latency)
                acks.append(ack)
                status = view.status.value if view.status else "none"
                statuses[status] = statuses.get(status, 0) + 1
                signalled = [
                    str(e.get("rung")) for e in _events(api, task_id) if e["event"] == "subagent.signal"
                ]
                top = signalled[-1] if signalled else "none"
                rungs[top] = rungs.get(top, 0) + 1
                # Pace on the daemon, not a clock: the next cancel starts once this task's slot
                # (and the orphan sweep that follows it) is done.
                deadline = time.monotonic() + WAIT_TIMEOUT_S
                while _running(api) > size - left and time.monotonic() < deadline:
                    time.sleep(0.005)
            done += size
    return CancelResult(
        samples=samples,
        batch=batch,
        cancel_to_terminal=summarize(latencies),
        cancel_ack=summarize(acks),
        statuses=statuses,
        ended_by_rung=rungs,
        breakdown_ms=_breakdown(daemon, cancelled),
    )


# Spans of a cancelled task in the daemon's log, each between two of its log lines.
SPANS = (
    ("ctrl/cancel sent -> child's ev/result", "cancel", "result"),
    ("ev/result -> child exited and reaped", "result", "exit"),
    ("reaped -> terminal committed", "exit", "terminal"),
)


def _breakdown(daemon: BenchDaemon, task_ids: list[str]) -> dict[str, float]:
    wanted = set(task_ids)
    marks: dict[str, dict[str, float]] = {task_id: {} for task_id in task_ids}
    for line in daemon.daemon.log():
        task_id, ts = line.get("task_id"), line.get("ts")
        if task_id not in wanted or not isinstance(task_id, str) or not isinstance(ts, str):
            continue
        event = line.get("event")
        if event == "subagent.signal" and line.get("rung") == "cancel":
            mark = "cancel"
        elif event == "subagent.exit":
            mark = "result" if line.get("phase") == "result" else "exit"
        elif event == "task.terminal":
            mark = "terminal"
        else:
            continue
        marks[task_id].setdefault(mark, _epoch(ts))
    spans: dict[str, float] = {}
    for name, start, end in SPANS:
        values = [m[end] - m[start] for m in marks.values() if start in m and end in m]
        if values:
            spans[name] = round(statistics.median(values) * 1000, 1)
    return spans


def _epoch(ts: str) -> float:
    return datetime.strptime(ts, "%Y-%m-%dT%H:%M:%S.%fZ").replace(tzinfo=UTC).timestamp()


def _cancel_one(api: ApiClient, waiter: socket.socket, task_id: str) -> tuple[float, float, TaskView]:
    """(cancel → terminal seen, cancel ack, terminal view) for one task in a hanging model call."""
    # `task.wait` is in the daemon's socket before `task.cancel` is sent; the daemon registers it
    # within a millisecond, far inside the cancel path (were it ever late, a sample reads high).
    request = WaitRequest(id=1, params=WaitParams(task_id=task_id))
    waiter.sendall(encode(request))
    outcome: list[tuple[bytes, float]] = []
    thread = threading.Thread(target=_read_line, args=(waiter, outcome), name=f"wait-{task_id}")
    thread.start()
    started = time.monotonic()
    api.call(CancelRequest(params=CancelParams(task_id=task_id, reason="bench")))
    acked = time.monotonic()
    thread.join(timeout=WAIT_TIMEOUT_S + 10)
    if not outcome:
        raise RuntimeError(f"task.wait for {task_id} did not return")
    line, at = outcome[0]
    view = request.validate_result(json.loads(line)["result"])
    return at - started, acked - started, view


def _read_line(sock: socket.socket, outcome: list[tuple[bytes, float]]) -> None:
    """Read one response line; stamp its arrival."""
    data = b""
    sock.settimeout(WAIT_TIMEOUT_S)
    while not data.endswith(b"\n"):
        chunk = sock.recv(1 << 16)
        if not chunk:
            return
        data += chunk
    outcome.append((data, time.monotonic()))
