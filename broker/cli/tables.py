"""Tables as the CLI prints them: each column as wide as its widest cell, so that no value (an
MQTT client id can be 65,535 characters long) pushes the columns after it out of line."""

from __future__ import annotations

from collections.abc import Collection, Iterable, Sequence

GAP = "  "


def table(header: Sequence[str], rows: Iterable[Sequence[object]], *, right: Collection[str] = ()) -> str:
    """``header`` and ``rows`` as lines of aligned columns; the columns titled in ``right``
    (counts) aligned to the right. The last column is not padded: no line ends in blanks."""
    cells = [list(header), *([str(cell) for cell in row] for row in rows)]
    widths = [max(len(line[i]) for line in cells) for i in range(len(header))]
    aligns = [">" if title in right else "<" for title in header]
    return "\n".join(
        GAP.join(
            f"{cell:{align}{width}}" for cell, width, align in zip(line, widths, aligns, strict=True)
        ).rstrip()
        for line in cells
    )
