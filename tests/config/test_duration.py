"""Durations and sizes: the spellings operators write, the garbage they must not, and exact round trips."""

from __future__ import annotations

import math

import pytest
from hypothesis import given
from hypothesis import strategies as st

from agentd.config.duration import DurationError, format_duration, format_size, parse_duration, parse_size


@pytest.mark.parametrize(
    ("value", "seconds"),
    [
        pytest.param("30s", 30.0, id="seconds"),
        pytest.param("5m", 300.0, id="minutes"),
        pytest.param("2h", 7200.0, id="hours"),
        pytest.param("1d", 86400.0, id="days"),
        pytest.param("500ms", 0.5, id="milliseconds"),
        pytest.param("1h30m", 5400.0, id="compound"),
        pytest.param(" 2 h ", 7200.0, id="spaces"),
        pytest.param("1.5m", 90.0, id="fractional-unit"),
        pytest.param("90", 90.0, id="plain-string"),
        pytest.param(90, 90.0, id="int"),
        pytest.param(1.5, 1.5, id="float"),
        pytest.param("0", 0.0, id="zero"),
        pytest.param("10M", 600.0, id="unit-case-insensitive"),
    ],
)
def test_durations_parse_to_seconds(value: object, seconds: float) -> None:
    assert parse_duration(value) == seconds


@pytest.mark.parametrize(
    ("value", "message"),
    [
        pytest.param("abc", "expected a duration", id="garbage"),
        pytest.param("", "expected a duration", id="empty"),
        pytest.param("5x", "expected a duration", id="unknown-unit"),
        pytest.param("5m junk", "expected a duration", id="trailing-garbage"),
        pytest.param("s", "expected a duration", id="unit-only"),
        pytest.param("-1", "must not be negative", id="negative-string"),
        pytest.param("-5m", "must not be negative", id="negative-unit"),
        pytest.param(-1, "must not be negative", id="negative-int"),
        pytest.param(True, "boolean", id="boolean"),
        pytest.param(math.nan, "expected a duration", id="nan"),
        pytest.param(math.inf, "expected a duration", id="infinity"),
        pytest.param(None, "got NoneType", id="none"),
        pytest.param([1], "got list", id="list"),
    ],
)
def test_bad_durations_are_refused_with_a_clear_message(value: object, message: str) -> None:
    with pytest.raises(DurationError, match=message):
        parse_duration(value)


@pytest.mark.parametrize(
    ("value", "size"),
    [
        pytest.param("512M", 512 << 20, id="mebibytes"),
        pytest.param("2G", 2 << 30, id="gibibytes"),
        pytest.param("1t", 1 << 40, id="lowercase-tebibytes"),
        pytest.param("10KiB", 10 << 10, id="iec-suffix"),
        pytest.param("512B", 512, id="bytes-suffix"),
        pytest.param("1.5G", 3 << 29, id="fractional-whole-bytes"),
        pytest.param("1024", 1024, id="plain-string"),
        pytest.param(1024, 1024, id="int"),
    ],
)
def test_sizes_parse_to_bytes(value: object, size: int) -> None:
    assert parse_size(value) == size


@pytest.mark.parametrize(
    ("value", "message"),
    [
        pytest.param("2X", "expected a size", id="unknown-unit"),
        pytest.param("G", "expected a size", id="unit-only"),
        pytest.param("-1G", "must not be negative", id="negative"),
        pytest.param("1.3K", "not a whole number of bytes", id="fractional-bytes"),
        pytest.param(1.5, "not a whole number of bytes", id="fractional-float"),
        pytest.param(False, "boolean", id="boolean"),
    ],
)
def test_bad_sizes_are_refused_with_a_clear_message(value: object, message: str) -> None:
    with pytest.raises(DurationError, match=message):
        parse_size(value)


def test_long_garbage_is_shortened_in_the_message() -> None:
    with pytest.raises(DurationError) as caught:
        parse_duration("x" * 500)
    assert len(str(caught.value)) < 120


@pytest.mark.parametrize(
    ("seconds", "text"),
    [
        pytest.param(5400.0, "1h30m", id="compound"),
        pytest.param(0.0, "0s", id="zero"),
        pytest.param(1.5, "1.5s", id="fraction"),
        pytest.param(1e-05, "0.00001s", id="tiny-no-exponent"),
        pytest.param(90061.0, "1d1h1m1s", id="every-unit"),
    ],
)
def test_durations_format_in_the_shortest_exact_spelling(seconds: float, text: str) -> None:
    assert format_duration(seconds) == text


@given(st.floats(min_value=0, max_value=1e12, allow_nan=False, allow_infinity=False))
def test_a_formatted_duration_parses_back_to_the_same_seconds(seconds: float) -> None:
    assert parse_duration(format_duration(seconds)) == seconds


@given(st.integers(min_value=0, max_value=1 << 50))
def test_a_formatted_size_parses_back_to_the_same_bytes(size: int) -> None:
    assert parse_size(format_size(size)) == size


@given(st.integers(min_value=0, max_value=10**7), st.sampled_from(["ms", "s", "m", "h", "d"]))
def test_a_count_of_one_unit_parses_to_count_times_unit(count: int, unit: str) -> None:
    scale = {"ms": 0.001, "s": 1, "m": 60, "h": 3600, "d": 86400}[unit]
    assert parse_duration(f"{count}{unit}") == pytest.approx(count * scale)
