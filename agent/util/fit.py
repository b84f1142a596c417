"""Tables that fit the width they are drawn at without breaking a word.

Rich shrinks a column below its longest word when a table is too wide, and folds the word
("corre ct", "withi n noise"). A `FitTable` picks its layout when it is drawn, from the width it
is given: the boxed table when every column fits at its longest word; else a compact table
without borders, leaving out the columns that matter least (named under it); else each row as
"column: value" lines. Only a word longer than a whole column that may hold long tokens (paths,
test ids) is ever folded.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field

from rich import box
from rich.console import Console, ConsoleOptions, Group, JustifyMethod, RenderableType, RenderResult
from rich.measure import Measurement
from rich.table import Table
from rich.text import Text

LONG_WORD = 24  # a column with long_words=True may fold a word longer than this, rather than not fit


@dataclass(frozen=True)
class Column:
    """One column: `drop` 0 is never left out; a higher `drop` is left out sooner when space runs short."""

    header: str
    justify: JustifyMethod = "left"
    drop: int = 0
    style: str = ""
    long_words: bool = False  # paths, ids, free text: a word longer than LONG_WORD may fold
    most: float | None = None  # at most this share of the width (never below its longest word): names that wrap


def _text(cell: str | Text) -> Text:
    """A str cell is markup, as rich's Table reads it (callers escape what others wrote)."""
    return cell if isinstance(cell, Text) else Text.from_markup(cell)


def _longest_word(t: Text) -> int:
    return max((Text(w).cell_len for w in t.plain.split()), default=0)


def _longest_line(t: Text) -> int:
    return max((Text(ln).cell_len for ln in t.plain.splitlines()), default=0)


_BREAK_AFTER = ",;:/|&"  # a list or a path: where a token too long for its column reads well split


def break_long(cell: Text, width: int) -> Text:
    """A cell whose tokens longer than `width` are split into lines after a comma, colon or slash where one
    is near the end of the room (a plain fold otherwise): "x.py:214,216,\n225-226", never "x.py:214,2\n16".
    Only a cell of one style is rewritten; one with spans is left to fold."""
    if cell.spans or all(len(w) <= width for w in cell.plain.split()):
        return cell
    out = []
    for piece in re.split(r"(\s+)", cell.plain):
        while len(piece) > width:
            cut = max(piece.rfind(c, 0, width) for c in _BREAK_AFTER) + 1
            cut = cut if cut > width // 2 else width
            out += [piece[:cut], "\n"]
            piece = piece[cut:]
        out.append(piece)
    return Text("".join(out), style=cell.style, justify=cell.justify)


def share(extra: int, wants: list[int]) -> list[int]:
    """`extra` columns of space handed out so that the columns wanting least get all they want first
    (a short column is never wrapped to give a long one a little more)."""
    got = [0] * len(wants)
    left = sorted(range(len(wants)), key=lambda i: wants[i])
    while left and extra > 0:
        fair = extra // len(left)
        i = left[0]
        if wants[i] <= fair:
            got[i] = wants[i]
            extra -= wants[i]
            left.pop(0)
            continue
        for n, j in enumerate(left):  # nobody left gets all it wants: an even share, the rest to the first
            got[j] = fair + (1 if n < extra - fair * len(left) else 0)
        break
    return got


@dataclass
class Layout:
    kind: str  # "boxed" | "compact" | "stacked"
    keep: list[int] = field(default_factory=list)  # indexes of the columns shown
    widths: list[int] = field(default_factory=list)  # each shown column's text width


class FitTable:
    """A table of str (markup) or Text cells that fits whatever width it is drawn at (see the module)."""

    def __init__(self, columns: Sequence[Column], rows: Iterable[Sequence[str | Text]] = (), *,
                 title: str | Text | None = None, show_header: bool = True, boxed: bool = True,
                 lines: bool = False):
        self.columns = list(columns)
        self.lines = lines  # a rule between rows (boxed only)
        self.boxed = boxed  # False: never borders, even where they would fit
        self.rows: list[list[Text]] = []
        self.title = None if title is None else _text(title)
        self.show_header = show_header
        for row in rows:
            self.add_row(*row)

    def add_row(self, *cells: str | Text) -> None:
        self.rows.append([_text(c) for c in cells])

    # -- choosing a layout --------------------------------------------------------------------------
    def _bounds(self, i: int, width: int) -> tuple[int, int, int]:
        """(narrowest, widest cell, widest with the header) text width of column i at a table `width`: its
        longest word, its longest cell line, and that or the header's line if longer (a header wraps before a
        cell does); the widest no more than the column's `most` share of the width."""
        col = self.columns[i]
        cells = [r[i] for r in self.rows]
        header = [Text(col.header)] if self.show_header else []
        lo = max((_longest_word(c) for c in cells + header), default=1)
        if col.long_words:
            lo = min(lo, LONG_WORD)
        lo = max(1, lo)
        hi = max(lo, max((_longest_line(c) for c in cells), default=1))
        top = max(hi, max((_longest_line(c) for c in header), default=1))
        if col.most is not None:
            hi, top = (max(lo, min(x, int(width * col.most))) for x in (hi, top))
        return lo, hi, top

    @staticmethod
    def _overhead(kind: str, n: int) -> int:
        """Borders and padding: a boxed table has a rule and a space either side of each cell; a compact
        one two spaces between columns."""
        return 3 * n + 1 if kind == "boxed" else 2 * (n - 1)

    def layout(self, width: int) -> Layout:
        bounds = [self._bounds(i, width) for i in range(len(self.columns))]

        def fits(kind: str, keep: list[int]) -> bool:
            return sum(bounds[i][0] for i in keep) + self._overhead(kind, len(keep)) <= width

        keep = list(range(len(self.columns)))
        kind = "boxed" if self.boxed and fits("boxed", keep) else "compact"
        if kind == "compact":
            droppable = sorted((i for i in keep if self.columns[i].drop), key=lambda i: (-self.columns[i].drop, -i))
            while not fits(kind, keep) and droppable:
                keep.remove(droppable.pop(0))
            if not fits(kind, keep):
                return Layout("stacked")
        widths = [bounds[i][0] for i in keep]
        for k in (1, 2):  # room for the cells first, then for the headers
            room = width - self._overhead(kind, len(keep)) - sum(widths)
            extra = share(room, [max(0, bounds[i][k] - w) for i, w in zip(keep, widths)])
            widths = [w + e for w, e in zip(widths, extra)]
        return Layout(kind, keep, widths)

    # -- drawing --------------------------------------------------------------------------------------
    def _table(self, lay: Layout) -> Table:
        compact = lay.kind == "compact"
        t = Table(box=None if compact else box.HEAVY_HEAD, show_header=self.show_header, pad_edge=not compact,
                  header_style="bold" if compact else "table.header", show_edge=not compact,
                  show_lines=self.lines and not compact)
        for i, w in zip(lay.keep, lay.widths):
            col = self.columns[i]
            t.add_column(col.header, justify=col.justify, style=col.style, width=w, overflow="fold")
        for row in self.rows:
            t.add_row(*(break_long(row[i], w) if self.columns[i].long_words else row[i]
                        for i, w in zip(lay.keep, lay.widths)))
        return t

    def _stacked(self) -> RenderableType:
        """Each row as lines: its first cell, then "header: value" for the others, wrapped at words."""
        lines: list[RenderableType] = []
        for row in self.rows:
            lines.append(Text.assemble(row[0].copy(), style="bold"))
            for col, cell in list(zip(self.columns, row))[1:]:
                if cell.plain.strip():
                    lines.append(Text.assemble((f"  {col.header}: " if self.show_header else "  ", "dim"),
                                               cell.copy()))
        return Group(*lines)

    def __rich_console__(self, console: Console, options: ConsoleOptions) -> RenderResult:
        lay = self.layout(options.max_width)
        if self.title is not None:
            yield self.title.copy()
        if lay.kind == "stacked":
            yield self._stacked()
            return
        yield self._table(lay)
        left = [self.columns[i].header for i in range(len(self.columns)) if i not in lay.keep]
        if left:
            yield Text(f"(left out at {options.max_width} columns: {', '.join(left)})", style="dim")

    def __rich_measure__(self, console: Console, options: ConsoleOptions) -> Measurement:
        lay = self.layout(options.max_width)
        if lay.kind == "stacked":
            return Measurement(options.max_width, options.max_width)
        w = sum(lay.widths) + self._overhead(lay.kind, len(lay.keep))
        w = max(w, self.title.cell_len if self.title is not None else 0)
        return Measurement(min(w, options.max_width), min(w, options.max_width))
