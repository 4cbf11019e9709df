"""The product speaks of the product, and every reference resolves.

Run by `scripts/check` (and `python scripts/product_words.py [ROOT]`). Two kinds of problem, each
printed as `file:line: what`, and the exit status is 1 when there is any:

- words about how the project was made rather than what the software does — work-session and
  ticket numbers, branch and worktree names, "merged" as a history, who built what — in every
  tracked text file. A comment says why the code is as it is; a decision says what, why and what
  it costs; benchmark history is dated, not numbered;
- references that lead nowhere: a section of docs/design.md that is not one of its headings, a
  relative markdown link whose file does not exist, a `docs/*.md` page named anywhere that does
  not exist, or a document the repository does not hold at all.

The scan reads text only: binary files, `tests/npm/` (third-party packages), this file and its
test (they name the problems they look for) are skipped.
"""

from __future__ import annotations

import re
import subprocess
import sys
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path

SKIPPED_PREFIXES = ("tests/npm/",)
SKIPPED_FILES = frozenset({"scripts/product_words.py", "tests/test_product_words.py"})
# Files whose words are not checked (their references still are), each with its reason.
# Exact lines a word pattern matches but that are about the software, each with its reason.
ALLOWED_LINES: frozenset[tuple[str, str]] = frozenset()

# (pattern, what is wrong). Case-insensitive; each match is one problem.
WORD_PATTERNS: tuple[tuple[re.Pattern[str], str], ...] = tuple(
    (re.compile(pattern, re.IGNORECASE), why)
    for pattern, why in (
        (r"\bsession[s]?\s#?\d", "a work-session number"),
        (r"\bissue[s]?[\s-]#?\d", "a ticket number"),
        (r"\bwork[ -]?tree[s]?\b", "a work tree"),
        (r"\bwt-\d", "a work-tree name"),
        (r"\bengineer(?:s\b|s'|'s\b)", "who made it"),
        (r"\bbuilt\sin\sparallel\b", "how it was made"),
        (
            r"\bat\smerge\b|\bby\smerge\b|'s\smerge\b|\b(?:all|everything)\smerged\b|\bmerged\s(?:in)?to\smain\b",
            "a merge as history",
        ),
        (r"\bmain's (?:daemon|code|branch)\b", "a branch name"),
        (r"(?-i:\bDESIGN(?:\.md\b| §))", "a document the repository does not hold (docs/design.md is)"),
        (r"\.\./shared\b|/work/shared\b", "a path outside the repository"),
        (r"(?-i:\bRFC 0\d{3}\b)", "a document the repository does not hold (docs/loop.md, docs/design.md)"),
    )
)

DESIGN = "docs/design.md"
# "docs/design.md §8", "[design.md](design.md) §6–§8", "docs/design.md §9/§14", "§9, §14".
DESIGN_CITATION = re.compile(r"design\.md(?:\]\([^)\s]*\))?,?\s+(§\d+(?:(?:\s*[–/,-]\s*|\s+and\s+)§\d+)*)")
SECTION_NUMBER = re.compile(r"§(\d+)")
DESIGN_HEADING = re.compile(r"^## (\d+)\. ", re.MULTILINE)
MARKDOWN_LINK = re.compile(r"\]\(([^)\s]+)\)")
DOCS_PAGE = re.compile(r"(?<![\w/.-])docs/[\w.-]+\.md\b")
LINKED_FILES = re.compile(r"^(?:docs/[^/]+|README)\.md$")


@dataclass(frozen=True)
class Problem:
    path: str
    line: int
    what: str

    def __str__(self) -> str:
        return f"{self.path}:{self.line}: {self.what}"


def word_problems(path: str, text: str) -> list[Problem]:
    """Words about how the project was made, in line order (pure). A pattern is searched in the
    whole text, so words wrapped across two lines are found too."""
    found: list[tuple[int, Problem]] = []
    for pattern, why in WORD_PATTERNS:
        for match in pattern.finditer(text):
            line = _line_at(text, match.start())
            if (path, line.strip()) not in ALLOWED_LINES:
                number = text.count("\n", 0, match.start()) + 1
                found.append((match.start(), Problem(path, number, f"{why}: {match.group(0)!r}")))
    return [problem for _, problem in sorted(found, key=lambda item: item[0])]


def _line_at(text: str, offset: int) -> str:
    start = text.rfind("\n", 0, offset) + 1
    end = text.find("\n", offset)
    return text[start : end if end >= 0 else len(text)]


def reference_problems(
    path: str,
    text: str,
    exists: Callable[[str], bool],
    design_sections: frozenset[int],
    anchors: Callable[[str], frozenset[str] | None] = lambda _: None,
) -> Iterator[Problem]:
    """Each line's references that lead nowhere (pure). `exists` answers for repository paths;
    `anchors` gives a markdown file's heading anchors, or None when they are not checked."""
    links = LINKED_FILES.match(path) is not None
    folder = path.rpartition("/")[0]
    for number, line in enumerate(text.splitlines(), 1):
        for citation in DESIGN_CITATION.finditer(line):
            for section in SECTION_NUMBER.findall(citation.group(1)):
                if int(section) not in design_sections:
                    yield Problem(path, number, f"{DESIGN} has no section §{section}")
        for page in DOCS_PAGE.findall(line):
            if not exists(page):
                yield Problem(path, number, f"{page} does not exist")
        if links:
            for target in MARKDOWN_LINK.findall(line):
                missing = missing_link(folder, target, exists) or missing_anchor(
                    path, folder, target, anchors
                )
                if missing:
                    yield Problem(path, number, f"link to {missing}, which does not exist")


def missing_link(folder: str, target: str, exists: Callable[[str], bool]) -> str | None:
    """The repository path a relative link names when that path does not exist, else None."""
    if re.match(r"^[a-z][a-z0-9+.-]*:", target) or target.startswith("#"):
        return None  # a URL, or an anchor in the same page
    file = target.split("#", 1)[0]
    resolved = resolve(folder, file)
    if resolved is None:
        return file  # outside the repository
    return None if exists(resolved) else resolved


def missing_anchor(
    path: str, folder: str, target: str, anchors: Callable[[str], frozenset[str] | None]
) -> str | None:
    """`file#anchor` when a link's markdown file has no heading with that anchor, else None."""
    file, _, anchor = target.partition("#")
    if not anchor or re.match(r"^[a-z][a-z0-9+.-]*:", target):
        return None
    resolved = path if not file else resolve(folder, file)
    known = anchors(resolved) if resolved is not None else None
    return None if known is None or anchor in known else f"{resolved}#{anchor}"


def resolve(folder: str, file: str) -> str | None:
    """A relative path from `folder`, as a repository path; None when it leaves the repository."""
    parts: list[str] = folder.split("/") if folder else []
    for part in file.split("/"):
        if part == "..":
            if not parts:
                return None
            parts.pop()
        elif part not in ("", "."):
            parts.append(part)
    return "/".join(parts)


def heading_anchors(text: str) -> frozenset[str]:
    """The anchors a markdown page's headings get on GitHub: lower case, punctuation dropped,
    spaces as hyphens."""
    return frozenset(
        re.sub(r"[^\w\- ]", "", title.strip().lower()).replace(" ", "-")
        for title in re.findall(r"^#+ (.*)$", text, re.MULTILINE)
    )


def design_sections(text: str) -> frozenset[int]:
    """The section numbers docs/design.md has as `## N. Title` headings."""
    return frozenset(int(number) for number in DESIGN_HEADING.findall(text))


def tracked_texts(root: Path) -> Iterator[tuple[str, str]]:
    """(path, text) of every tracked text file under `root`, skipped prefixes and binaries left out."""
    listing = subprocess.run(
        ["git", "ls-files", "-z"], cwd=root, capture_output=True, check=True, timeout=60
    ).stdout.decode()
    for path in filter(None, listing.split("\0")):
        if path.startswith(SKIPPED_PREFIXES) or path in SKIPPED_FILES:
            continue
        try:
            data = (root / path).read_bytes()
        except (FileNotFoundError, IsADirectoryError):
            continue  # deleted in the work tree, or a submodule
        if b"\0" in data[:8192]:
            continue
        try:
            yield path, data.decode("utf-8")
        except UnicodeDecodeError:
            continue


def problems(root: Path) -> list[Problem]:
    texts = dict(tracked_texts(root))
    design = texts.get(DESIGN, "")
    sections = design_sections(design)

    def exists(path: str) -> bool:
        return path in texts or (root / path).exists()

    def anchors(path: str) -> frozenset[str] | None:
        return heading_anchors(texts[path]) if path.endswith(".md") and path in texts else None

    found: list[Problem] = []
    if not design:
        found.append(Problem(DESIGN, 1, "missing: the code and docs cite its sections"))
    for path, text in sorted(texts.items()):
        found.extend(word_problems(path, text))
        found.extend(reference_problems(path, text, exists, sections, anchors))
    return found


def main(argv: Iterable[str]) -> int:
    args = list(argv)
    root = Path(args[0]) if args else Path(__file__).resolve().parent.parent
    found = problems(root)
    for problem in found:
        print(problem)
    if found:
        print(
            f"{len(found)} problem(s): say what the software does, and point at what exists.", file=sys.stderr
        )
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
