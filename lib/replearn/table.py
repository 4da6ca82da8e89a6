"""A small result table for notebooks: one HTML table on the page, aligned text where HTML is not
shown (:class:`Table`). The base of every table the book displays (settings, results, the
methods' summaries), so it sits below everything that makes one."""

from __future__ import annotations

from html import escape

#: Inline styles of :class:`Table` (the page keeps them without a stylesheet of the book's own).
CELL_STYLE = "padding: 0.25em 0.75em"
CAPTION_STYLE = "caption-side: top; text-align: left; padding-bottom: 0.3em"
NUMBER_STYLE = "; white-space: nowrap"   # right-aligned (number) columns: "0.61 ± 0.08" on one line


class Table:
    """A small result table rendered as one HTML table on the page (and as aligned text where
    HTML is not shown): ``display(Table(["method", "gap"], rows, caption=...))``. Cells are
    shown as given, so pass the strings that the prose glues (a number formatted once).
    ``parts``: ``{row index: title}``, a title row over the whole width before that row (the table
    in parts, e.g. the methods of a paper's table and the others)."""

    def __init__(self, header, rows, *, caption: str | None = None, align: str | None = None,
                 parts: dict[int, str] | None = None):
        self.header = [str(h) for h in header]
        self.rows = [[str(c) for c in row] for row in rows]
        if not self.header or any(len(r) != len(self.header) for r in self.rows):
            raise ValueError(f"every row needs {len(self.header)} cells (the header's length)")
        self.parts = {int(i): str(t) for i, t in (parts or {}).items()}
        if any(not 0 <= i < len(self.rows) for i in self.parts):
            raise ValueError(f"parts must name rows 0..{len(self.rows) - 1}, got {sorted(self.parts)}")
        self.caption = caption
        self.align = align or "l" + "r" * (len(self.header) - 1)
        if len(self.align) != len(self.header) or set(self.align) - set("lrc"):
            raise ValueError(f"align must hold one of 'l', 'r', 'c' per column, got {self.align!r}")

    def __repr__(self) -> str:
        widths = [max(len(r[j]) for r in [self.header, *self.rows]) for j in range(len(self.header))]
        just = {"l": str.ljust, "r": str.rjust, "c": str.center}

        def line(cells):
            return " | ".join(just[a](c, w) for c, w, a in zip(cells, widths, self.align)).rstrip()

        out = ([self.caption] if self.caption else []) + [line(self.header), "-+-".join("-" * w for w in widths)]
        for i, r in enumerate(self.rows):
            out += [f"[{self.parts[i]}]"] if i in self.parts else []
            out.append(line(r))
        return "\n".join(out)

    def _repr_html_(self) -> str:
        side = {"l": "left", "r": "right", "c": "center"}

        def cells(tag, row):
            return "".join(f'<{tag} style="text-align: {side[a]}; {CELL_STYLE}{NUMBER_STYLE if a == "r" and tag == "td" else ""}">'
                           f'{escape(c)}</{tag}>' for c, a in zip(row, self.align))

        caption = f'<caption style="{CAPTION_STYLE}">{escape(self.caption)}</caption>' if self.caption else ""
        title = (f'<tr><th colspan="{len(self.header)}" style="text-align: left; {CELL_STYLE}; font-style: italic">'
                 '{}</th></tr>')
        body = "".join((title.format(escape(self.parts[i])) if i in self.parts else "") + f"<tr>{cells('td', r)}</tr>"
                       for i, r in enumerate(self.rows))
        return (f'<table class="replearn-table">{caption}<thead><tr>{cells("th", self.header)}</tr></thead>'
                f"<tbody>{body}</tbody></table>")
