"""Text a model, a tool or another user wrote, made safe to print on a terminal: control
characters (C0, C1, DEL) and bidirectional overrides and isolates are shown as escapes, so no
such text can move the cursor, retitle the window, write the clipboard or reorder what is shown.
`--json` output is never passed through here: it stays exact."""

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


def cut(text: str, limit: int, *, hint: str = "--full shows all") -> str:
    """`text` cut to `limit` characters, saying how much was left out and how to see it."""
    if len(text) <= limit:
        return text
    return f"{text[:limit]}… [{len(text) - limit} more characters; {hint}]"
