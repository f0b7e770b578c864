"""Plain-text tables: a header, a rule, left-aligned text and right-aligned numbers."""
from __future__ import annotations

from collections.abc import Sequence

INDENT = "  "


def render(headers: Sequence[str], rows: Sequence[Sequence[str]],
           left: int = 1) -> str:
    """Lay out ``rows`` under ``headers``.

    Args:
        headers: the column titles.
        rows: the cells, already formatted as text.
        left: how many leading columns are left-aligned (the rest are numbers).

    Returns:
        The table, each line indented, without a trailing newline.
    """
    widths = [max(len(str(cell)) for cell in column) for column in zip(headers, *rows,
                                                                          strict=True)]

    def line(cells: Sequence[str]) -> str:
        parts = [cell.ljust(width) if index < left else cell.rjust(width)
                 for index, (cell, width) in enumerate(zip(cells, widths, strict=True))]
        return INDENT + "  ".join(parts).rstrip()

    rule = INDENT + "  ".join("-" * width for width in widths)
    return "\n".join([line(headers), rule, *(line(row) for row in rows)])


def section(title: str) -> str:
    """A section title underlined with ``=``."""
    return f"\n{title}\n{'=' * len(title)}"


def ms(value: float) -> str:
    """Milliseconds with precision that suits their size."""
    return f"{value:.3f}" if value < 1 else f"{value:.2f}" if value < 100 else f"{value:.1f}"


def times(value: float) -> str:
    """A ratio, ``3.4x``."""
    return f"{value:.1f}x" if value < 100 else f"{value:.0f}x"


def verdict(met: bool) -> str:
    """``yes`` or ``MISSED`` (loud, so a missed target is not overlooked)."""
    return "yes" if met else "MISSED"


def human_bytes(count: int) -> str:
    """``1234567`` -> ``1.23 MB`` (decimal units, as file browsers show them)."""
    if count >= 1_000_000:
        return f"{count / 1_000_000:.2f} MB"
    if count >= 1_000:
        return f"{count / 1_000:.0f} kB"
    return f"{count} B"
