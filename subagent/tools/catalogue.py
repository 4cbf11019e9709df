"""The resource catalogue: awareness of what can be read, never the bodies (docs/loop.md, "Resources"; pure).

One compact line per resource or resource template while the whole block fits `budget_bytes`
(a template's `{placeholders}` let the model name resources no listing could); past that, resources
are summarised by URI prefix with counts, then by scheme, and the block is cut to the budget
with a count of what was left out. The model reads a body deliberately, with `resource_read`.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from urllib.parse import urlsplit

READ_TOOL = "resource_read"
MAX_LINE_DESCRIPTION = 160
MAX_FIELD_CHARS = 300

_HEADER = f"Resources you can read with `{READ_TOOL}` (uri; listed for awareness, bodies are not included):"
_TEMPLATE_NOTE = "A uri with {placeholders} is a template: fill them in to name a resource."
_SUMMARY_HEADER = f"Resources (too many to list; read one with `{READ_TOOL}` and its full uri):"


@dataclass(frozen=True, slots=True)
class CatalogueEntry:
    """What the catalogue knows about one resource; every text field came from a server (untrusted)."""

    server: str
    uri: str
    name: str = ""
    description: str = ""
    mime_type: str | None = None
    size: int | None = None
    # `uri` is an RFC 6570 uri template (from `resources/templates/list`), not a uri.
    template: bool = False


def _one_line(text: str, limit: int) -> str:
    line = " ".join(text.split())
    return line if len(line) <= limit else f"{line[: limit - 1]}…"


def _fits(text: str, budget_bytes: int) -> bool:
    return len(text.encode()) <= budget_bytes


def entry_line(entry: CatalogueEntry) -> str:
    """One resource as a single compact line: uri, name, type, size, one-line description."""
    parts = [f"- {_one_line(entry.uri, MAX_FIELD_CHARS)}"]
    if entry.template:
        parts.append("(template)")
    name = _one_line(entry.name, MAX_FIELD_CHARS)
    if name and name != entry.uri:
        parts.append(f'"{name}"')
    facts = [f for f in (entry.mime_type, None if entry.size is None else f"{entry.size} bytes") if f]
    if facts:
        parts.append(f"({', '.join(_one_line(f, MAX_FIELD_CHARS) for f in facts)})")
    description = _one_line(entry.description, MAX_LINE_DESCRIPTION)
    line = " ".join(parts)
    return f"{line}: {description}" if description else line


_EXPRESSION = re.compile(r"\{([+#./;?&]?)([^}]*)\}")


def template_pattern(template: str) -> re.Pattern[str]:
    """A regex matching the uris an RFC 6570 template can expand to (levels 1–3; pure).

    `{var}` is one path segment's worth, `{+var}`/`{#var}` anything, `{/var}` further segments,
    `{?a,b}`/`{&a}` a query part, `{.var}`/`{;var}` their prefixed forms.
    """
    parts: list[str] = []
    position = 0
    for match in _EXPRESSION.finditer(template):
        parts.append(re.escape(template[position : match.start()]))
        operator = match.group(1)
        if operator in ("+", "#"):
            parts.append(".*")
        elif operator == "/":
            parts.append("(?:/[^/?#]*)*")
        elif operator in ("?", "&"):
            parts.append(r"(?:[?&][^#]*)?")
        elif operator in (".", ";"):
            parts.append(f"(?:{re.escape(operator)}[^/?#]*)*")
        else:
            parts.append("[^/?#]*")
        position = match.end()
    parts.append(re.escape(template[position:]))
    return re.compile("".join(parts))


def template_matches(template: str, uri: str) -> bool:
    return template_pattern(template).fullmatch(uri) is not None


def uri_prefix(uri: str) -> str:
    """The grouping key one level below the authority: `file:///repo/a/b.py` → `file:///repo/`.

    `paged://item/3` → `paged://item/`; `demo://readme` (authority only) → `demo://`.
    """
    split = urlsplit(uri)
    if not split.scheme:
        head, slash, _ = uri.partition("/")
        return f"{head}/" if slash else "(no scheme)"
    if not uri.startswith(f"{split.scheme}://"):
        return f"{split.scheme}:"
    base = f"{split.scheme}://{split.netloc}"
    parts = [p for p in split.path.split("/") if p]
    if len(parts) >= 2:
        return f"{base}/{parts[0]}/"
    if parts:
        return f"{base}/"
    return f"{split.scheme}://"


def uri_scheme(uri: str) -> str:
    scheme = urlsplit(uri).scheme
    return f"{scheme}:" if scheme else "(no scheme)"


def _group_lines(entries: Sequence[CatalogueEntry], key: Callable[[str], str], noun: str) -> list[str]:
    counts: dict[tuple[str, str], int] = {}
    for entry in entries:
        group = (entry.server, key(entry.uri))
        counts[group] = counts.get(group, 0) + 1
    return [
        f"- {n} resource{'s' if n != 1 else ''} {noun} {_one_line(group, MAX_FIELD_CHARS)}"
        f"{'…' if noun == 'under' else ''} (server {server})"
        for (server, group), n in counts.items()
    ]


def _cut_to_budget(header: str, lines: Sequence[str], budget_bytes: int) -> str:
    """`header` plus as many `lines` as fit, then a line counting the rest; never over budget."""
    kept: list[str] = [header]
    for i, line in enumerate(lines):
        remaining = len(lines) - i
        tail = f"- … {remaining} more not shown"
        if _fits("\n".join([*kept, line, tail]), budget_bytes) or (
            remaining == 1 and _fits("\n".join([*kept, line]), budget_bytes)
        ):
            kept.append(line)
            continue
        if _fits("\n".join([*kept, tail]), budget_bytes):
            kept.append(tail)
        break
    return "\n".join(kept) if len(kept) > 1 or not lines else ""


def render_catalogue(entries: Sequence[CatalogueEntry], budget_bytes: int) -> str:
    """The catalogue block for the model, at most `budget_bytes` UTF-8 bytes ("" if nothing fits)."""
    if not entries or budget_bytes <= 0:
        return ""
    header = _HEADER if not any(e.template for e in entries) else f"{_HEADER}\n{_TEMPLATE_NOTE}"
    full = "\n".join([header, *(entry_line(e) for e in entries)])
    if _fits(full, budget_bytes):
        return full
    for key, noun in ((uri_prefix, "under"), (uri_scheme, "with scheme")):
        summary = "\n".join([_SUMMARY_HEADER, *_group_lines(entries, key, noun)])
        if _fits(summary, budget_bytes):
            return summary
    return _cut_to_budget(_SUMMARY_HEADER, _group_lines(entries, uri_scheme, "with scheme"), budget_bytes)
