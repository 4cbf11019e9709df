"""A client's (or a model's) output schema cannot make anything fetch a URL or read a file
: a `$ref` outside the schema is refused at submit and at the spawn chokepoint,
naming the field, and the validator's registry never retrieves anything."""

from __future__ import annotations

import json
import socket
import threading
from collections.abc import Iterator
from pathlib import Path

import anyio
import pytest
from pydantic import JsonValue

from agentd.supervision.ports import RunPorts
from agentd.supervision.task_run import TaskRun
from protocol.contract import contract_problem, remote_ref, result_errors
from protocol.control import SpawnRequestParams
from protocol.spawn import EndpointSpec, OutputContract, SpawnPayload
from tests.support.daemon import running_daemon, scripted
from tests.support.run_ports import Ledger, RecordingJournal, RecordingSpawner, queued_record

SECRET = "root-only secret 4f1c"


class Listener:
    """A loopback TCP listener that records every connection made to it."""

    def __init__(self) -> None:
        self.sock = socket.create_server(("127.0.0.1", 0))
        self.sock.settimeout(0.1)
        self.port = self.sock.getsockname()[1]
        self.connections = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._accept, daemon=True)
        self._thread.start()

    def _accept(self) -> None:
        while not self._stop.is_set():
            try:
                conn, _ = self.sock.accept()
            except TimeoutError:
                continue
            except OSError:
                return
            self.connections += 1
            conn.close()

    def url(self, path: str = "/schema.json") -> str:
        return f"http://127.0.0.1:{self.port}{path}"

    def close(self) -> None:
        self._stop.set()
        self._thread.join(timeout=5)
        self.sock.close()


@pytest.fixture
def listener() -> Iterator[Listener]:
    opened = Listener()
    try:
        yield opened
    finally:
        opened.close()


@pytest.fixture
def root_only_file(tmp_path: Path) -> Path:
    path = tmp_path / "secret.json"
    path.write_text(f'{{"const": "{SECRET}"}}')
    path.chmod(0o600)
    return path


def test_a_remote_ref_is_found_wherever_it_hides() -> None:
    assert remote_ref({"$ref": "#/$defs/a", "$defs": {"a": {"type": "string"}}}) is None
    assert remote_ref({"properties": {"a": {"$ref": "http://h/x"}}}) == "properties.a.$ref"
    assert remote_ref({"allOf": [{"type": "object"}, {"$ref": "file:///etc/passwd"}]}) == "allOf.1.$ref"
    assert remote_ref({"$dynamicRef": "other.json#meta"}) == "$dynamicRef"
    # A property *named* $ref is data, not a reference.
    assert remote_ref({"properties": {"$ref": {"type": "string"}}}) is None


def test_validation_never_fetches_a_url_or_reads_a_file(listener: Listener, root_only_file: Path) -> None:
    refs = (listener.url(), root_only_file.as_uri(), (root_only_file.parent / "missing.json").as_uri())
    for ref in refs:
        errors = result_errors({"a": SECRET}, {"properties": {"a": {"$ref": ref}}})
        assert len(errors) == 1
        assert "only references inside the schema" in errors[0]
        assert SECRET not in errors[0]
    # Defence in depth: a schema whose `$id` names the listener resolves a bad local pointer
    # against itself, never by asking the network.
    based: dict[str, JsonValue] = {"$id": listener.url(), "properties": {"a": {"$ref": "#/$defs/missing"}}}
    (error,) = result_errors({"a": 1}, based)
    assert "does not resolve inside it" in error
    assert listener.connections == 0


@pytest.mark.processes
def test_a_submitted_schema_with_a_remote_ref_is_refused_naming_the_field(
    tmp_path: Path, listener: Listener, root_only_file: Path
) -> None:
    body = scripted("quick", [{"text": '{"a": "x"}'}], tmp_path) + '[defaults]\nmodel = "quick"\n'
    with running_daemon(tmp_path, body) as daemon:
        for ref in (listener.url(), root_only_file.as_uri()):
            schema_file = tmp_path / "schema.json"
            schema_file.write_text(json.dumps({"properties": {"a": {"$ref": ref}}}))
            done = daemon.cli("submit", "x", "--json", "--output-schema", str(schema_file))
            assert done.returncode == 2, done.stdout + done.stderr
            assert "output_contract.schema.properties.a.$ref" in done.stderr
            assert "never a URL or a file" in done.stderr
            assert SECRET not in done.stderr + done.stdout
        assert daemon.call("task.list", {}) == []  # nothing was queued
    assert listener.connections == 0


@pytest.mark.anyio
async def test_a_model_asking_for_a_child_with_a_remote_ref_is_refused_and_nothing_spawns(
    listener: Listener,
) -> None:
    ledger: Ledger = []
    record = queued_record("complete")
    ports = RunPorts(journal=RecordingJournal(ledger, record), spawner=RecordingSpawner(ledger))
    endpoint = EndpointSpec(kind="openai", base_url="http://127.0.0.1:9/v1", model="unused")
    payload = SpawnPayload(
        task_id=record.task_id, run_id=record.run_id, instruction="x", intelligence=[endpoint]
    )
    run = TaskRun(ports, record, payload)
    contract = OutputContract(format="json", schema_={"properties": {"a": {"$ref": listener.url()}}})
    with anyio.fail_after(10):
        answer = await run.spawn("0", SpawnRequestParams(instruction="child", output_contract=contract))
    assert isinstance(answer, dict)
    assert answer["refused"] == contract_problem(contract)
    assert "output_contract.schema.properties.a.$ref" in str(answer["refused"])
    assert ledger == []
    assert list(run.nodes) == ["0"]
    assert listener.connections == 0
