"""Tables that fit the terminal (pure): which columns a listing shows at a given width and how
wide each is. A column a person cannot do without is kept; a long free-text column is cut (with
`…`) down to its header's width; then low-value columns are dropped, lowest first. A header is
never cut. Widths are terminal cells: a wide (East Asian) character takes two.
"""

from __future__ import annotations

import unicodedata
from collections.abc import Sequence
from dataclasses import dataclass

GAP = 2  # cells between two columns


@dataclass(frozen=True, slots=True)
class Column:
    header: str
    # Never dropped (the id, the state).
    keep: bool = False
    # A free-text column that may be cut (with `…`) down to its header's width before anything
    # is dropped.
    shrink: bool = False
    # When the row is still too wide, columns are dropped lowest `rank` first.
    rank: int = 0
    right: bool = False


def cells(text: str) -> int:
    """How many terminal cells `text` takes."""
    return sum(2 if unicodedata.east_asian_width(char) in "WF" else 1 for char in text)


def clip(text: str, width: int) -> str:
    """`text` cut to `width` cells, its last cell `…` when anything was cut."""
    if cells(text) <= width:
        return text
    out, used = [], 0
    for char in text:
        size = cells(char)
        if used + size > width - 1:
            break
        out.append(char)
        used += size
    return "".join(out) + "…"


def fit(columns: Sequence[Column], natural: Sequence[int], width: int, *, gap: int = GAP) -> list[int | None]:
    """Each column's width (None: dropped) so that a row takes at most `width` cells.

    `natural` is each column's widest cell. When even the kept columns at their narrowest do
    not fit, they are returned at that width: the terminal wraps, nothing is lost.
    """
    shown = [True] * len(columns)
    while True:
        widths = _shrunk(columns, natural, shown, width, gap)
        if _total(widths, gap) <= width:
            return widths
        droppable = [i for i, column in enumerate(columns) if shown[i] and not column.keep]
        if not droppable:
            return widths
        shown[min(droppable, key=lambda i: (columns[i].rank, -i))] = False


def _shrunk(
    columns: Sequence[Column], natural: Sequence[int], shown: Sequence[bool], width: int, gap: int
) -> list[int | None]:
    widths: list[int | None] = [
        max(cells(column.header), size) if on else None
        for column, size, on in zip(columns, natural, shown, strict=True)
    ]
    excess = _total(widths, gap) - width
    for i, column in enumerate(columns):
        current = widths[i]
        if excess <= 0 or current is None or not column.shrink:
            continue
        take = min(excess, current - cells(column.header))
        widths[i] = current - take
        excess -= take
    return widths


def _total(widths: Sequence[int | None], gap: int) -> int:
    present = [w for w in widths if w is not None]
    return sum(present) + gap * max(0, len(present) - 1)


def render(columns: Sequence[Column], rows: Sequence[Sequence[str]], width: int) -> list[str]:
    """The header and the rows as lines of at most `width` cells (cells already safe to print)."""
    natural = [max((cells(row[i]) for row in rows), default=0) for i in range(len(columns))]
    widths = fit(columns, natural, width)
    lines = []
    for row in [[column.header for column in columns], *rows]:
        parts = []
        for column, cell, size in zip(columns, row, widths, strict=True):
            if size is None:
                continue
            text = clip(cell, size)
            pad = " " * (size - cells(text))
            parts.append(pad + text if column.right else text + pad)
        lines.append((" " * GAP).join(parts).rstrip())
    return lines
