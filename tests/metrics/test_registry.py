"""The metrics registry, its bounded labels and its configuration, without a daemon."""

from __future__ import annotations

import typing
from pathlib import Path

import pytest
from prometheus_client import generate_latest

from agentd.config.load import ConfigError, load_config
from agentd.metrics.address import TcpAddress, UnixAddress, parse_listen
from agentd.metrics.labels import TOOL_OUTCOMES, KnownNames, ModelCall, ServerRestart, ToolCall, observe
from agentd.metrics.port import NULL_METRICS
from agentd.metrics.registry import PrometheusMetrics
from agentd.service.metrics import build_metrics
from subagent.tools.router import ErrorKind
from tests.metrics.scrape import series, value

NAMES = KnownNames(endpoints=frozenset({"fast", "slow"}), servers=frozenset({"fs", "web"}))


def _page(metrics: PrometheusMetrics) -> str:
    return generate_latest(metrics.registry).decode()


def test_label_cardinality_stays_bounded_with_1000_distinct_task_ids() -> None:
    metrics = PrometheusMetrics(lambda: NAMES)

    def one_task(n: int) -> None:
        task_id = f"t_{n:026d}"
        metrics.task_submitted()
        metrics.subagent_ready(0.05)
        # Every field a child could fill with something unbounded is filled with one.
        metrics.child_event(
            "intel.result",
            {"endpoint": task_id, "outcome": f"ok-{n}", "dur_ms": 10, "tokens_in": 1, "tokens_out": 1},
        )
        metrics.child_event("intel.result", {"endpoint": "fast", "outcome": "ok", "dur_ms": 5})
        metrics.child_event("tool.result", {"server": f"https://{n}.example/mcp", "err": task_id})
        metrics.child_event("tool.result", {"server": "fs", "err": None, "tool": f"fs__read_{n}"})
        metrics.child_event("mcp.connect", {"server": task_id, "outcome": "reconnected"})
        metrics.rung("sigterm" if n % 2 else task_id, "stuck")
        metrics.liveness(task_id)
        metrics.task_finished("completed" if n % 3 else task_id, n)
        metrics.fired("schedule", task_id, "started")

    one_task(0)
    after_one = series(_page(metrics))
    for n in range(1, 1000):
        one_task(n)
    page = _page(metrics)
    assert series(page) <= after_one + 12  # the few `other`/known combinations the first task missed
    assert "t_0000" not in page and "example" not in page and "fs__read" not in page
    assert value(page, "agentd_tasks_submitted_total") == 1000
    assert value(page, "agentd_model_calls_total", endpoint="other", outcome="other") == 1000
    assert value(page, "agentd_model_calls_total", endpoint="fast", outcome="ok") == 1000
    assert value(page, "agentd_tool_calls_total", server="other", outcome="other") == 1000
    assert value(page, "agentd_tool_calls_total", server="fs", outcome="ok") == 1000
    assert value(page, "agentd_mcp_server_restarts_total", server="other") == 1000
    assert value(page, "agentd_tasks_finished_total", status="other", exit_code="0") == 1
    assert value(page, "agentd_fires_total", kind="schedule", name="other", outcome="started") == 1000


def test_child_events_map_to_observations_with_bounded_labels() -> None:
    assert observe(
        "intel.result",
        {"endpoint": "slow", "outcome": "retry", "dur_ms": 1500, "tokens_in": None, "tokens_out": "x"},
        NAMES,
    ) == ModelCall("slow", "retry", 1.5, 0, 0)
    assert observe("tool.result", {"server": None, "err": None, "dur_ms": 3}, NAMES) == ToolCall(
        "self", "ok", 0.003
    )
    assert observe("tool.result", {"server": "web", "err": "timeout"}, NAMES) == ToolCall(
        "web", "timeout", None
    )
    assert observe("mcp.connect", {"server": "fs", "outcome": "reconnected"}, NAMES) == ServerRestart("fs")
    assert observe("mcp.connect", {"server": "fs", "outcome": "ok"}, NAMES) is None
    assert observe("loop.step", {"step": 1}, NAMES) is None
    # A boolean or a negative duration is not a number of milliseconds.
    assert observe("tool.result", {"server": "fs", "err": None, "dur_ms": True}, NAMES) == ToolCall(
        "fs", "ok", None
    )


@pytest.mark.parametrize("kind", typing.get_args(ErrorKind))
def test_every_tool_error_kind_a_subagent_reports_is_its_own_outcome(kind: str) -> None:
    assert {"ok", *typing.get_args(ErrorKind)} == TOOL_OUTCOMES
    assert observe("tool.result", {"server": "fs", "err": kind}, NAMES) == ToolCall("fs", kind, None)


def test_the_page_documents_every_metric(tmp_path: Path) -> None:
    reference = (Path(__file__).resolve().parents[2] / "docs" / "metrics.md").read_text()
    metrics = PrometheusMetrics()
    names = {family.name for family in metrics.registry.collect()}
    assert names, "no metric families"
    assert sorted(n for n in names if f"`{n}" not in reference) == []


@pytest.mark.parametrize(
    ("text", "parsed"),
    [
        ("127.0.0.1:9464", TcpAddress("127.0.0.1", 9464)),
        ("localhost:0", TcpAddress("localhost", 0)),
        ("[::1]:9464", TcpAddress("::1", 9464)),
        ("/run/agentd/metrics.sock", UnixAddress("/run/agentd/metrics.sock")),
    ],
)
def test_listen_addresses(text: str, parsed: object) -> None:
    assert parse_listen(text) == parsed


@pytest.mark.parametrize("text", ["9464", "metrics.sock", "127.0.0.1:99999", "[zz]:1", "host:", ":9464"])
def test_bad_listen_addresses_are_refused(text: str) -> None:
    with pytest.raises(ValueError, match=r"."):
        parse_listen(text)


def _load(tmp_path: Path, body: str) -> object:
    path = tmp_path / "agentd.toml"
    path.write_text(f'[daemon]\nsocket = "{tmp_path / "api.sock"}"\nstate_dir = "{tmp_path}"\n' + body)
    return load_config(str(path), environ={})


@pytest.mark.parametrize(
    ("body", "problem"),
    [
        ('[metrics]\nlisten = "api.sock"\n', r"metrics\.listen: .*neither HOST:PORT"),
        ("[metrics]\nlisten = '{api}'\n", r"metrics\.listen: is the API socket"),
        ('[metrics]\ntextfile = "agentd.txt"\n', r"metrics\.textfile: .*\.prom"),
        ('[metrics]\ntextfile = "nowhere/agentd.prom"\n', r"metrics\.textfile: .* is not a directory"),
        ('[metrics]\ntextfile_interval_s = "0s"\n', r"metrics\.textfile_interval_s"),
    ],
)
def test_metrics_config_problems_name_the_key(tmp_path: Path, body: str, problem: str) -> None:
    with pytest.raises(ConfigError, match=problem):
        _load(tmp_path, body.replace("{api}", str(tmp_path / "api.sock")))


def test_metrics_are_a_no_op_unless_an_output_is_configured(tmp_path: Path) -> None:
    config = _load(tmp_path, "")
    assert build_metrics(lambda: config) is NULL_METRICS  # type: ignore[arg-type,return-value]
    configured = _load(tmp_path, f'[metrics]\ntextfile = "{tmp_path / "a.prom"}"\n')
    metrics = build_metrics(lambda: configured)  # type: ignore[arg-type,return-value]
    assert isinstance(metrics, PrometheusMetrics)
    assert metrics.names().endpoints == frozenset({"demo"})


def test_cost_counts_by_configured_endpoint_and_owner_and_throttle_waits_are_a_histogram() -> None:
    metrics = PrometheusMetrics(lambda: NAMES)
    metrics.cost("fast", 1000, 0.25)
    metrics.cost("fast", 1000, 0.5)
    metrics.cost("unknown", 1001, 1.0)
    metrics.throttle_wait("slow", 2.0)
    page = _page(metrics)
    assert 'agentd_cost_usd_total{endpoint="fast",owner="1000"} 0.75' in page
    assert 'agentd_cost_usd_total{endpoint="other",owner="1001"} 1.0' in page
    assert 'agentd_throttle_wait_seconds_count{endpoint="slow"} 1.0' in page
