"""The hypothesis profile the checks run under (tests/conftest.py)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from hypothesis import settings

REPO = Path(__file__).resolve().parents[1]


def test_the_ci_profile_has_no_deadline_and_is_derandomized() -> None:
    ci = settings.get_profile("ci")
    assert ci.deadline is None
    assert ci.derandomize


def test_the_variable_scripts_check_sets_selects_the_ci_profile() -> None:
    probe = "from hypothesis import settings; print(settings().deadline, settings().derandomize)"
    conftest = "import tests.conftest; " + probe
    env = {k: v for k, v in os.environ.items() if k not in ("CI", "AGENTD_HYPOTHESIS_PROFILE")}
    chosen = subprocess.run(
        [sys.executable, "-c", conftest],
        capture_output=True,
        text=True,
        cwd=REPO,
        env={**env, "AGENTD_HYPOTHESIS_PROFILE": "ci"},
        timeout=60,
        check=True,
    )
    default = subprocess.run(
        [sys.executable, "-c", conftest],
        capture_output=True,
        text=True,
        cwd=REPO,
        env=env,
        timeout=60,
        check=True,
    )
    assert chosen.stdout.split() == ["None", "True"]
    assert default.stdout.split() != ["None", "True"]
    assert "AGENTD_HYPOTHESIS_PROFILE" in (REPO / "scripts" / "check").read_text()
