"""`agentd run`'s model and logging flags: --stream, --context-window, -v/--log-level, --log-content."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

import pytest

from agentd.cli.main import build_parser
from agentd.cli.run import build_overrides, load_run_config
from tests.support.fake_llm import FakeLLM, chat, chat_chunks, sse
from tests.support.run_cli import BASIC, log_events, run, script

pytestmark = pytest.mark.processes


def parse(*argv: str) -> argparse.Namespace:
    return build_parser().parse_args(["run", "x", *argv])


def request_bodies(fake: FakeLLM) -> list[dict[str, Any]]:
    bodies = [r.json for r in fake.requests]
    assert all(isinstance(b, dict) for b in bodies)
    return bodies  # type: ignore[return-value]


def test_stream_makes_the_endpoint_stream(tmp_path: Path) -> None:
    with FakeLLM() as fake:
        fake.enqueue(sse(chat_chunks("streamed answer")))
        done = run("x", "--intelligence", fake.base_url, "--model", "m", "--stream")
        assert done.returncode == 0, done.stderr[-2000:]
        assert done.stdout == "streamed answer\n"
        (body,) = request_bodies(fake)
        assert body["stream"] is True


def test_without_stream_the_request_is_not_streamed(tmp_path: Path) -> None:
    with FakeLLM() as fake:
        fake.enqueue(chat("plain answer"))
        done = run("x", "--intelligence", fake.base_url, "--model", "m")
        assert done.returncode == 0, done.stderr[-2000:]
        (body,) = request_bodies(fake)
        assert "stream" not in body


def test_stream_applies_to_a_configured_endpoint_named_by_model(tmp_path: Path) -> None:
    with FakeLLM() as fake:
        config = tmp_path / "agentd.toml"
        config.write_text(
            f'[intelligence.local]\nkind = "openai"\nbase_url = "{fake.base_url}"\nmodel = "m"\n'
        )
        fake.enqueue(sse(chat_chunks("from the config")))
        done = run("x", "--config", str(config), "--model", "local", "--stream")
        assert done.returncode == 0, done.stderr[-2000:]
        assert done.stdout == "from the config\n"
        assert request_bodies(fake)[0]["stream"] is True


def test_endpoint_flags_reach_the_chosen_endpoint_and_its_fallbacks_only(tmp_path: Path) -> None:
    config_file = tmp_path / "agentd.toml"
    config_file.write_text(
        '[intelligence.a]\nkind = "openai"\nbase_url = "http://127.0.0.1:9/v1"\nmodel = "m"\nfallback = ["b"]\n'
        '[intelligence.b]\nkind = "openai"\nbase_url = "http://127.0.0.1:9/v1"\nmodel = "m"\n'
        '[intelligence.c]\nkind = "openai"\nbase_url = "http://127.0.0.1:9/v1"\nmodel = "m"\n'
    )
    args = parse("--stream", "--context-window", "4096", "--model", "a")
    overrides, model, _ = build_overrides(args)
    args.config = str(config_file)
    final = load_run_config(args, str(tmp_path), overrides, model)
    chain = final.endpoint_chain("a")
    assert [(e.name, e.stream, e.context_window) for e in chain] == [("a", True, 4096), ("b", True, 4096)]
    other = final.endpoint_chain("c")[0]
    assert (other.stream, other.context_window) == (False, 128_000)


def test_a_context_window_below_the_minimum_is_a_usage_error(tmp_path: Path) -> None:
    done = run("x", "--intelligence", script(tmp_path, [{"text": "x"}]), "--context-window", "100")
    assert (done.returncode, done.stderr) == (2, "agentd run: --context-window: must be at least 1024\n")


@pytest.mark.parametrize(
    ("argv", "level"),
    [
        pytest.param([], None, id="default-from-config"),
        pytest.param(["-v"], "debug", id="v"),
        pytest.param(["--verbose"], "debug", id="verbose"),
        pytest.param(["--log-level", "warning"], "warning", id="log-level"),
    ],
)
def test_the_log_level_flags_become_the_daemon_log_level(argv: list[str], level: str | None) -> None:
    overrides, _, _ = build_overrides(parse(*argv))
    daemon = overrides.get("daemon", {})
    assert isinstance(daemon, dict) and daemon.get("log_level") == level


def test_v_and_log_level_together_are_refused() -> None:
    with pytest.raises(SystemExit) as exc:
        parse("-v", "--log-level", "info")
    assert exc.value.code == 2


def events_of(stderr: str) -> set[str]:
    return {str(e["event"]) for e in log_events(stderr)}


def test_verbose_shows_model_calls_and_steps_that_info_hides(tmp_path: Path) -> None:
    intel = script(tmp_path, [{"text": "ok"}])
    quiet = run("x", "--intelligence", intel)
    loud = run("x", "--intelligence", intel, "-v")
    assert quiet.returncode == loud.returncode == 0
    assert not {"intel.call", "intel.result", "loop.step"} & events_of(quiet.stderr)
    assert {"intel.call", "intel.result", "loop.step"} <= events_of(loud.stderr)


def test_log_level_warning_hides_info_lines(tmp_path: Path) -> None:
    done = run("x", "--intelligence", script(tmp_path, [{"text": "ok"}]), "--log-level", "warning")
    assert done.returncode == 0
    assert not {"task.started", "loop.final", "task.terminal"} & events_of(done.stderr)


def test_the_configured_log_level_is_honoured(tmp_path: Path) -> None:
    config = tmp_path / "agentd.toml"
    config.write_text('[daemon]\nlog_level = "debug"\n')
    done = run("x", "--config", str(config), "--intelligence", script(tmp_path, [{"text": "ok"}]))
    assert done.returncode == 0, done.stderr[-2000:]
    assert "loop.step" in events_of(done.stderr)


def test_log_content_shows_the_models_replies_and_tool_calls_at_info(tmp_path: Path) -> None:
    turns = [
        {"text": "let me add", "tool_calls": [{"name": "demo__add", "arguments": {"a": 40, "b": 2}}]},
        {"text": "the sum is {last_tool_result}"},
    ]
    intel = script(tmp_path, turns)
    mcp = f"demo={sys.executable} {BASIC}"
    loud = run("add", "--intelligence", intel, "--mcp", mcp, "--log-content")
    assert loud.returncode == 0, loud.stderr[-2000:]
    replies = [e for e in log_events(loud.stderr) if e["event"] == "intel.result"]
    assert [e["level"] for e in replies] == ["info", "info"]
    assert [e["reply"] for e in replies] == ["let me add", "the sum is 42"]
    calls = replies[0]["reply_tool_calls"]
    assert isinstance(calls, list) and json.loads(calls[0].removeprefix("demo__add ")) == {"a": 40, "b": 2}

    quiet = run("add", "--intelligence", intel, "--mcp", mcp)
    assert quiet.returncode == 0
    assert "intel.result" not in events_of(quiet.stderr)
    assert "let me add" not in quiet.stderr


MANY_TOOLS = Path(__file__).resolve().parents[1] / "fixtures" / "mcp_many_tools.py"


def test_a_context_window_too_small_for_the_catalogue_exits_4_naming_the_sizes(tmp_path: Path) -> None:
    mcp = f"fs={sys.executable} {MANY_TOOLS}"
    done = run(
        "x", "--intelligence", script(tmp_path, [{"text": "x"}]), "--mcp", mcp, "--context-window", "1024"
    )
    assert done.returncode == 4, done.stderr[-2000:]
    line = [ln for ln in done.stderr.splitlines() if not ln.startswith("{")][-1]
    assert "crashed, abort intelligence (exit 4)" in line
    assert "context_window: the fixed part of every request does not fit" in line
    assert "1024-token window" in line

    roomy = run(
        "x", "--intelligence", script(tmp_path, [{"text": "fine"}]), "--mcp", mcp, "--context-window", "8192"
    )
    assert roomy.returncode == 0, roomy.stderr[-2000:]
