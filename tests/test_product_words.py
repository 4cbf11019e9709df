"""`scripts/product_words.py`: the product speaks of the product, and every reference resolves.

The check runs on this repository (it must pass) and on a small git repository made here, with
one planted problem of each kind (it must name each, file and line). The planted words are built
from pieces so that this file does not trip the check itself.
"""

from __future__ import annotations

import importlib.util
import subprocess
import sys
from pathlib import Path
from types import ModuleType

import pytest

ROOT = Path(__file__).resolve().parent.parent
SCRIPT = ROOT / "scripts" / "product_words.py"

DESIGN = "# design\n\n## 1. What it is\n\ntext\n\n## 2. Process model\n\ntext\n"


def _load() -> ModuleType:
    spec = importlib.util.spec_from_file_location("product_words", SCRIPT)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules["product_words"] = module  # dataclasses resolve their module by name
    spec.loader.exec_module(module)
    return module


words = _load()


def _run(root: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, str(SCRIPT), str(root)], capture_output=True, text=True, timeout=60, check=False
    )


def _repo(tmp_path: Path, files: dict[str, str]) -> Path:
    for name, text in files.items():
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_text(text)
    subprocess.run(["git", "init", "-q", str(tmp_path)], check=True, timeout=30)
    subprocess.run(["git", "-C", str(tmp_path), "add", "-A"], check=True, timeout=30)
    return tmp_path


def test_the_repository_passes() -> None:
    result = _run(ROOT)
    assert result.returncode == 0, result.stdout + result.stderr
    assert result.stdout == ""


def test_a_planted_word_and_missing_references_are_named_by_file_and_line(tmp_path: Path) -> None:
    session = "Sess" + "ion 9"
    root = _repo(
        tmp_path,
        {
            "docs/design.md": DESIGN,
            "docs/ok.md": "See [design.md](design.md) §2 and [ok](ok.md#ok).\n\n## OK\n",
            "pkg/mod.py": f'"""Fine."""\n\n# {session} made this faster.\n',
            "pkg/cites.py": "# docs/design.md §1, §2 hold; docs/design.md §7 does not.\n",
            "docs/links.md": "A [gone](gone.md) page, a [bad anchor](ok.md#nowhere), docs/none.md.\n",
            "logo.bin": "\0binary " + session,
            "tests/npm/pkg/readme.md": session + " and [x](missing.md)\n",
        },
    )
    result = _run(root)
    assert result.returncode == 1
    assert result.stdout.splitlines() == [
        "docs/links.md:1: docs/none.md does not exist",
        "docs/links.md:1: link to docs/gone.md, which does not exist",
        "docs/links.md:1: link to docs/ok.md#nowhere, which does not exist",
        "pkg/cites.py:1: docs/design.md has no section §7",
        f"pkg/mod.py:3: a work-session number: {session[:9]!r}",
    ]


def test_a_missing_design_document_is_a_problem(tmp_path: Path) -> None:
    root = _repo(tmp_path, {"pkg/mod.py": "# Plain words (docs/design.md §1).\n"})
    result = _run(root)
    assert result.returncode == 1
    assert "docs/design.md:1: missing" in result.stdout
    assert "pkg/mod.py:1: docs/design.md has no section §1" in result.stdout


@pytest.mark.parametrize(
    "line",
    [
        pytest.param("(" + "issue" + " 16)", id="ticket"),
        pytest.param("see " + "wt-" + "16c", id="work-tree-name"),
        pytest.param("other " + "engineer" + "s' benches", id="who-made-it"),
        pytest.param("everything " + "merged", id="merge-history"),
        pytest.param("two halves " + "built in " + "parallel", id="built-in-parallel"),
        pytest.param("as " + "DES" + "IGN §4 says", id="missing-document"),
        pytest.param("per " + "RFC" + " 0007 §3.4", id="missing-rfc"),
    ],
)
def test_each_kind_of_word_is_found(line: str) -> None:
    assert [p.line for p in words.word_problems("x.py", f"ok\n{line}\n")] == [2]


def test_a_word_wrapped_across_lines_is_found_where_it_starts() -> None:
    text = "first\nthe change for " + "issue" + "\n16 did this\n"
    assert [p.line for p in words.word_problems("x.md", text)] == [2]


@pytest.mark.parametrize(
    "line",
    [
        pytest.param("merged = merge_tables(base, value)", id="code-merge"),
        pytest.param("the merged MCP servers", id="merged-config"),
        pytest.param("a warm session's turn; this session ends idle", id="warm-session"),
        pytest.param("the loopback redirect (RFC 8252 §7.3)", id="ietf-rfc"),
        pytest.param("what a careful engineer writes in an afternoon", id="an-engineer"),
    ],
)
def test_words_about_the_software_pass(line: str) -> None:
    assert list(words.word_problems("x.py", line)) == []


def test_design_citations_cover_ranges_and_lists() -> None:
    text = "docs/design.md §1–§2, and [design.md](design.md) §2/§3; docs/design.md §1 and §4.\n"
    found = words.reference_problems("x.md", text, lambda _: True, frozenset({1, 2}))
    assert [p.what for p in found] == ["docs/design.md has no section §3", "docs/design.md has no section §4"]
