"""The STATUS= line: counts first, then every degraded state by name."""

from __future__ import annotations

import pytest

from agentd.service.status import ERROR_MAX_CHARS, ServiceState, status_text


@pytest.mark.parametrize(
    ("state", "text"),
    [
        pytest.param(ServiceState(queued=3, running=2), "3 queued, 2 running", id="healthy"),
        pytest.param(
            ServiceState(queued=0, running=1, draining=True), "draining: 0 queued, 1 running", id="draining"
        ),
        pytest.param(
            ServiceState(queued=1, running=0, journal_error="disk I/O error"),
            "1 queued, 0 running; degraded: journal failing: disk I/O error",
            id="journal-failing",
        ),
        pytest.param(
            ServiceState(queued=0, running=0, draining=True, journal_error="full", config_error="bad\nkey"),
            "draining: 0 queued, 0 running; degraded: journal failing: full; config reload rejected: bad key",
            id="everything-at-once",
        ),
        pytest.param(
            ServiceState(queued=0, running=0, failed_triggers=("inbox", "feed")),
            "0 queued, 0 running; degraded: 2 trigger(s) failed: inbox, feed",
            id="failed-triggers",
        ),
    ],
)
def test_status_text_names_counts_and_degraded_states(state: ServiceState, text: str) -> None:
    assert status_text(state) == text


def test_a_long_error_is_shortened_so_the_other_problems_still_show() -> None:
    text = status_text(ServiceState(queued=0, running=0, journal_error="x" * 5000, config_error="late"))
    assert text.endswith("config reload rejected: late")
    assert len(text) < 2 * ERROR_MAX_CHARS + 100
