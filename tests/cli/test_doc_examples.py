"""The examples the docs open with run as written, against what agentd ships."""

from __future__ import annotations

import json
import re
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

from agentd.config.bundled import BUNDLED_SCRIPTS_DIR

REPO = Path(__file__).resolve().parents[2]
SCRIPTED_DOC = REPO / "docs" / "scripted-model.md"


def blocks(path: Path, language: str) -> list[str]:
    return re.findall(rf"```{language}\n(.*?)```", path.read_text(), flags=re.DOTALL)


def test_the_scripted_model_docs_file_format_example_is_the_bundled_word_count_script() -> None:
    example = json.loads(blocks(SCRIPTED_DOC, "json")[1])
    assert example == json.loads((BUNDLED_SCRIPTS_DIR / "word-count.json").read_text())


@pytest.mark.processes
def test_the_scripted_model_docs_command_runs_against_the_example_server_as_written() -> None:
    command = blocks(SCRIPTED_DOC, "sh")[0].replace("\\\n", " ")
    argv = shlex.split(command)
    assert argv[0] == ".venv/bin/agentd"
    # The venv's programs, as the README installs them: this interpreter is that venv's.
    args = [a.replace(".venv/bin/python", sys.executable) for a in argv[1:]]
    argv = [sys.executable, "-m", "agentd", *args]
    done = subprocess.run(argv, capture_output=True, text=True, timeout=60, cwd=REPO)
    assert (done.returncode, done.stdout) == (0, "The instruction has 6 words.\n"), done.stderr[-2000:]
