"""Plain-text tables of the command line's reports (trials, evaluation metrics)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any


def _cell(value: Any) -> str:
    if value is None:
        return "-"
    return f"{value:.3f}" if isinstance(value, float) else str(value)


def format_table(rows: Sequence[Sequence[Any]], align: str = "") -> str:
    """`rows` (the header row, if any, first) as columns two spaces apart; numbers with 3 decimals, None as "-".

    `align` has a "<" (left) or ">" (right) for each of the first columns; the others are left-aligned."""
    cells = [[_cell(value) for value in row] for row in rows]
    if any(len(row) != len(cells[0]) for row in cells):
        raise ValueError(f"rows of {sorted({len(row) for row in cells})} cells; every row needs one cell per column")
    widths = [max(map(len, column)) for column in zip(*cells)]
    if set(align) - {"<", ">"} or len(align) > len(widths):
        raise ValueError(f"align takes a '<' or '>' for each of at most {len(widths)} columns, got {align!r}")
    align = align.ljust(len(widths), "<")
    # rstrip: a padded last column would end the lines in spaces.
    return "\n".join("  ".join(f"{cell:{a}{w}}" for cell, a, w in zip(row, align, widths)).rstrip() for row in cells)
