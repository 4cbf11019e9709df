"""The resource catalogue (pure): entry lines, the byte budget, and the summaries past it."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from subagent.tools.catalogue import (
    CatalogueEntry,
    entry_line,
    render_catalogue,
    template_matches,
    uri_prefix,
)

README = CatalogueEntry(
    "demo", "demo://readme", "readme", "What this is.\nMore detail.", "text/markdown", 1234
)
REPO = [
    CatalogueEntry("fs", f"file:///repo/src/m{i}.py", f"m{i}.py", "A module.", "text/x-python")
    for i in range(412)
]


@pytest.mark.parametrize(
    ("entry", "line"),
    [
        pytest.param(
            README,
            '- demo://readme "readme" (text/markdown, 1234 bytes): What this is. More detail.',
            id="full",
        ),
        pytest.param(CatalogueEntry("s", "s://a"), "- s://a", id="bare-uri"),
        pytest.param(CatalogueEntry("s", "s://a", name="s://a"), "- s://a", id="name-equal-to-uri-omitted"),
        pytest.param(
            CatalogueEntry("s", "s://a", description="x" * 500),
            f"- s://a: {'x' * 159}…",
            id="long-description",
        ),
    ],
)
def test_entry_lines(entry: CatalogueEntry, line: str) -> None:
    assert entry_line(entry) == line


@pytest.mark.parametrize(
    ("uri", "prefix"),
    [
        pytest.param("file:///repo/src/a.py", "file:///repo/", id="file-path"),
        pytest.param("paged://item/3", "paged://item/", id="authority-and-one-segment"),
        pytest.param("demo://readme", "demo://", id="authority-only"),
        pytest.param("https://h.example/a/b?q=1", "https://h.example/a/", id="http"),
        pytest.param("urn:isbn:123", "urn:", id="opaque"),
        pytest.param("relative/path", "relative/", id="no-scheme"),
    ],
)
def test_uri_prefixes(uri: str, prefix: str) -> None:
    assert uri_prefix(uri) == prefix


@pytest.mark.parametrize(
    ("entries", "budget", "expected"),
    [
        pytest.param([], 4000, "", id="no-resources"),
        pytest.param([README], 0, "", id="zero-budget"),
        pytest.param(
            [README],
            4000,
            "Resources you can read with `resource_read` (uri; listed for awareness, bodies are not "
            "included):\n"
            '- demo://readme "readme" (text/markdown, 1234 bytes): What this is. More detail.',
            id="fits",
        ),
        pytest.param(
            [*REPO, README],
            4000,
            "Resources (too many to list; read one with `resource_read` and its full uri):\n"
            "- 412 resources under file:///repo/… (server fs)\n"
            "- 1 resource under demo://… (server demo)",
            id="over-budget-summarised-by-prefix",
        ),
        pytest.param(
            [*REPO, README],
            30,
            "",
            id="not-even-the-header-fits",
        ),
    ],
)
def test_rendering(entries: list[CatalogueEntry], budget: int, expected: str) -> None:
    assert render_catalogue(entries, budget) == expected


def test_many_prefixes_fall_back_to_schemes() -> None:
    entries = [CatalogueEntry("fs", f"file:///dir{i}/f.txt") for i in range(200)]
    assert render_catalogue(entries, 200).splitlines()[1:] == [
        "- 200 resources with scheme file: (server fs)"
    ]


def test_too_many_groups_are_cut_with_a_count() -> None:
    entries = [CatalogueEntry(f"server{i}", f"s{i}://x") for i in range(50)]
    lines = render_catalogue(entries, 300).splitlines()
    assert lines[-1].startswith("- … ")
    assert lines[-1].endswith(" more not shown")


entries = st.lists(
    st.builds(
        CatalogueEntry, st.sampled_from(["a", "b"]), st.text(max_size=60), st.text(max_size=40), st.text()
    ),
    max_size=40,
)


@given(entries, st.integers(min_value=0, max_value=3000))
def test_the_catalogue_never_exceeds_its_budget(items: list[CatalogueEntry], budget: int) -> None:
    assert len(render_catalogue(items, budget).encode()) <= budget


def test_templates_are_listed_marked_and_explained_once() -> None:
    template = CatalogueEntry(
        "demo", "demo://greeting/{name}", "greeting", "Greets someone.", "text/plain", template=True
    )
    block = render_catalogue([README, template], 4000)
    lines = block.splitlines()
    assert lines[0].startswith("Resources you can read with `resource_read`")
    assert lines[1] == "A uri with {placeholders} is a template: fill them in to name a resource."
    assert lines[-1] == '- demo://greeting/{name} (template) "greeting" (text/plain): Greets someone.'
    assert block.count("Resources you can read") == 1


@pytest.mark.parametrize(
    ("template", "uri", "matches"),
    [
        ("demo://greeting/{name}", "demo://greeting/ada", True),
        ("demo://greeting/{name}", "demo://greeting/ada/lovelace", False),
        ("file:///{+path}", "file:///srv/a/b.txt", True),
        ("db://{table}/rows{?limit,offset}", "db://users/rows?limit=5&offset=10", True),
        ("db://{table}/rows{?limit,offset}", "db://users/rows", True),
        ("test://static/resource/{id}", "test://static/resource/7", True),
        ("test://static/resource/{id}", "test://other/resource/7", False),
    ],
)
def test_a_template_matches_the_uris_it_expands_to(template: str, uri: str, matches: bool) -> None:
    assert template_matches(template, uri) is matches
