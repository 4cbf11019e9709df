"""Test-session setup: subreaper for leak detection, the `no_leaks` fixture, the `fake_llm`
fixture, and hypothesis's profiles.

Tests that spawn processes take the `no_leaks` fixture (or the `processes` marker): after the
test, every descendant must be gone within a bounded wait, else the test fails (and the
strays are killed so one leak does not cascade).

Hypothesis runs under the `ci` profile when `AGENTD_HYPOTHESIS_PROFILE=ci` (scripts/check sets it)
or `CI` is set: no per-example deadline (a loaded shared machine is not a slow test) and
derandomized, so a run fails or passes the same way twice; elsewhere its default profile explores.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from hypothesis import settings

from processes.linux import set_child_subreaper
from tests.support.fake_llm import FakeLLM
from tests.support.leaks import kill_all, open_fd_count, wait_no_descendants

REPO = Path(__file__).resolve().parent.parent

HYPOTHESIS_PROFILE_ENV = "AGENTD_HYPOTHESIS_PROFILE"
settings.register_profile("ci", deadline=None, derandomize=True, database=None, print_blob=True)
settings.load_profile(os.environ.get(HYPOTHESIS_PROFILE_ENV) or ("ci" if os.environ.get("CI") else "default"))


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line("markers", "processes: the test spawns processes; checked for leaks")
    config.addinivalue_line(
        "markers",
        "alone: a latency or warm-up bound that another test running at the same moment would skew; "
        "scripts/check runs these after the parallel part, one at a time",
    )
    config.addinivalue_line(
        "markers",
        "install: builds the wheel and runs it from a fresh virtual environment (about half a minute); "
        '-m "not install" leaves it out',
    )
    set_child_subreaper()
    # Children launched by tests import the repo's packages without an install step.
    os.environ["PYTHONPATH"] = os.pathsep.join(p for p in (str(REPO), os.environ.get("PYTHONPATH", "")) if p)


@pytest.fixture
def no_leaks() -> Iterator[None]:
    fds_before = open_fd_count()
    yield
    strays = wait_no_descendants(timeout_s=10.0)
    if strays:
        described = [f"{p.pid} {p.name()} {p.cmdline()[:4]}" for p in strays]
        kill_all(strays)
        pytest.fail(f"processes leaked: {described}")
    # Allow a little slack for lazily created loop/selector fds that persist across tests.
    fds_after = open_fd_count()
    assert fds_after <= fds_before + 4, f"fd growth: {fds_before} -> {fds_after}"


@pytest.fixture
def fake_llm() -> Iterator[FakeLLM]:
    """A fake OpenAI-compatible model server on loopback (`tests/support/fake_llm.py`)."""
    with FakeLLM() as fake:
        yield fake


@pytest.fixture(autouse=True)
def _logs_to_the_real_stderr() -> Iterator[None]:
    """A test that runs a command in process configures its logs onto `sys.stderr` as pytest
    captures it, a stream closed after that test: the next test on this worker that logs would
    write to a closed file. Each test ends with the logs pointed back at the process's stderr."""
    yield
    from agentd import logs

    logs.configure(stream=sys.__stderr__)


@pytest.fixture(autouse=True)
def _leak_check_marked(request: pytest.FixtureRequest) -> None:
    if request.node.get_closest_marker("processes") is not None:
        request.getfixturevalue("no_leaks")


PYTHON = sys.executable
