"""The daemon's JSON log lines: field order, timestamp, levels, exceptions, unknown events, threshold."""

from __future__ import annotations

import io
import json
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from agentd import logs


@pytest.fixture
def stream() -> Iterator[io.StringIO]:
    out = io.StringIO()
    logs.configure("info", stream=out)
    yield out
    logs.configure("info")


def lines(stream: io.StringIO) -> list[dict[str, Any]]:
    return [json.loads(line) for line in stream.getvalue().splitlines()]


def test_a_line_has_ts_level_event_comp_first_then_the_fields_in_order(stream: io.StringIO) -> None:
    log = logs.get(task_id="t_1", handle="0")
    log.info("subagent.ready", pid=7, dur_ms=12, ts="ignored", level="ignored")
    (line,) = lines(stream)
    assert list(line) == ["ts", "level", "event", "comp", "task_id", "handle", "pid", "dur_ms"]
    assert (line["level"], line["event"], line["comp"], line["pid"]) == (
        "info",
        "subagent.ready",
        "supervisor",
        7,
    )
    assert re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z", line["ts"])


def test_levels_warn_and_exception_are_named_as_structlog_names_them(stream: io.StringIO) -> None:
    log = logs.get()
    log.warn("proc.drain")
    try:
        raise KeyError("boom")
    except KeyError:
        log.exception("task.terminal", err="x")
    warn, error = lines(stream)
    assert warn["level"] == "warning"
    assert (error["level"], error["err"]) == ("error", "x")
    assert list(error)[-1] == "exception" and "KeyError: 'boom'" in error["exception"]


def test_an_unknown_event_is_kept_and_marked_and_odd_values_are_their_repr(stream: io.StringIO) -> None:
    logs.get().info("no.such.event", where=Path("/x"))
    (line,) = lines(stream)
    assert line["event_unknown"] is True
    assert line["where"] == repr(Path("/x"))


def test_the_threshold_applies_to_loggers_bound_before_it_changed(stream: io.StringIO) -> None:
    log = logs.get(comp="agent")
    log.debug("intel.call")
    assert not logs.enabled("debug")
    logs.set_level("debug")
    assert logs.enabled("debug")
    log.debug("intel.call")
    logs.set_level("warning")
    log.info("loop.start")
    assert [(line["event"], line["comp"]) for line in lines(stream)] == [("intel.call", "agent")]


class _Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


def test_text_lines_carry_the_same_fields_in_the_same_order() -> None:
    out = io.StringIO()
    logs.configure("info", stream=out, fmt="text")
    try:
        logs.get(task_id="t_1").info("task.terminal", status="completed", err="two words", code=None)
    finally:
        logs.configure("info")
    line = out.getvalue()
    assert re.fullmatch(
        r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z info    task\.terminal  comp=supervisor task_id=t_1 "
        r'status=completed err="two words" code=null\n',
        line,
    ), line


def test_a_daemon_writes_text_to_a_terminal_and_json_elsewhere() -> None:
    assert logs.default_format(_Terminal()) == "text"
    assert logs.default_format(io.StringIO()) == "json"
