"""How the CLI shows things to a person: text a model, a tool or another user wrote made safe to
print on a terminal (control characters (C0, C1, DEL) and bidirectional overrides and isolates are
shown as escapes, so no such text can move the cursor, retitle the window, write the clipboard or
reorder what is shown), and the small words and figures every listing shares (plurals, ages,
counts, sizes). `--json` output is never passed through here: it stays exact."""

from __future__ import annotations

# Bidirectional formatting characters: embeddings, overrides, isolates, marks.
_BIDI = frozenset(
    [0x061C, 0x200E, 0x200F, 0x202A, 0x202B, 0x202C, 0x202D, 0x202E, 0x2066, 0x2067, 0x2068, 0x2069]
)


def _escaped(char: str) -> str:
    code = ord(char)
    return f"\\x{code:02x}" if code < 0x100 else f"\\u{code:04x}"


def safe(text: str, *, keep_newlines: bool = True) -> str:
    """`text` with every control and bidi formatting character escaped (newlines and tabs kept
    when `keep_newlines`)."""
    out = []
    for char in text:
        code = ord(char)
        if char in "\n\t" and keep_newlines:
            out.append(char)
        elif code < 0x20 or 0x7F <= code < 0xA0 or code in _BIDI:
            out.append(_escaped(char))
        else:
            out.append(char)
    return "".join(out)


def one_line(text: str) -> str:
    """`text` safe to print, its runs of whitespace (newlines included) folded into one space:
    for a table cell or a line that must stay one line."""
    return safe(" ".join(text.split()), keep_newlines=False)


def cut(text: str, limit: int, *, hint: str = "--full shows all") -> str:
    """`text` cut to `limit` characters, saying how much was left out and how to see it."""
    if len(text) <= limit:
        return text
    return f"{text[:limit]}… [{len(text) - limit} more characters; {hint}]"


def plural(count: int, noun: str, nouns: str | None = None) -> str:
    """`1 step`, `2 steps` (`nouns` for an irregular plural)."""
    return f"{count} {noun if count == 1 else nouns or noun + 's'}"


def human_age(seconds: float | None) -> str:
    """`42s`, `3m05s`, `2h03m`, `4d06h`; `-` when unknown."""
    if seconds is None:
        return "-"
    s = max(0, int(seconds))
    if s < 60:
        return f"{s}s"
    if s < 3600:
        return f"{s // 60}m{s % 60:02d}s"
    if s < 86400:
        return f"{s // 3600}h{s % 3600 // 60:02d}m"
    return f"{s // 86400}d{s % 86400 // 3600:02d}h"


def human_count(n: int | None) -> str:
    """`950`, `1.2k`, `45k`, `1.3M`; `-` when unknown."""
    if n is None:
        return "-"
    if n >= 1_000_000:
        return f"{n / 1_000_000:.1f}M"
    if n >= 10_000:
        return f"{n / 1000:.0f}k"
    if n >= 1000:
        return f"{n / 1000:.1f}k"
    return str(n)


def human_bytes(n: int | None) -> str:
    """`512B`, `1.5K`, `45.2M`, `1.1G`; `-` when unknown."""
    if n is None:
        return "-"
    value = float(n)
    for unit in ("B", "K", "M", "G"):
        if value < 1024 or unit == "G":
            return f"{value:.0f}{unit}" if unit == "B" else f"{value:.1f}{unit}"
        value /= 1024
    return f"{value:.1f}G"
