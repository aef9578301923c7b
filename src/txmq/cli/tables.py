"""How the commands of ``txmq`` print: a table for people, JSON for scripts.

Owns: ``Col`` (a column: its header, whether it names something, whether only ``--wide``
shows it), ``show`` and the ``--json`` / ``--wide`` options.

Rules a table keeps, whatever the terminal's width:
- No cell is ever cut short: every column folds its text onto more lines rather than end it with
  an ellipsis, so a name, an endpoint or an id is always there whole.
- A column of identifiers (``Col.ident``: names, endpoints, ids) keeps its widest cell on one
  line while the others can give way (they wrap between words): rich alone would share the
  squeeze between all columns and fold an id in two.
- By default a command shows the columns an operator reads first, chosen so its identifiers fit
  one line in 80 columns; ``--wide`` adds the others, and when even squeezed they leave no room
  for whole identifiers the table takes the width it needs (as ``kubectl -o wide`` does).
- ``--json`` prints the command's answer, never a table: its field names are an interface
  (fields are added, never renamed or removed), unlike the headers of a table.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import click
from rich.cells import cell_len
from rich.console import Console, JustifyMethod
from rich.table import Table

console = Console()

json_option = click.option(
    "--json", "as_json", is_flag=True, help="Print the answer as JSON (stable field names)."
)
wide_option = click.option(
    "--wide", is_flag=True, help="Show every column (the default fits 80 columns)."
)


@dataclass(frozen=True, slots=True)
class Col:
    """A table column. ``ident``: it holds names, endpoints or ids (kept on one line while
    the width allows); ``wide``: only ``--wide`` shows it; ``justify``: "right" for figures."""

    header: str
    ident: bool = False
    wide: bool = False
    justify: JustifyMethod = "left"


def yes_no(value: Any) -> str:
    """A boolean as people read it in a table."""
    return "yes" if value else "no"


def human_bytes(value: Any) -> Any:
    """A byte count in KiB, MiB or GiB with one decimal; anything else as it is."""
    if not isinstance(value, int) or isinstance(value, bool):
        return value
    if value < 2**20:
        return f"{value / 2**10:.1f} KiB" if value >= 2**10 else f"{value} B"
    return f"{value / 2**20:.1f} MiB" if value < 2**30 else f"{value / 2**30:.1f} GiB"


def show(
    title: str,
    cols: Sequence[Col],
    rows: Sequence[Sequence[Any]],
    data: Any,
    as_json: bool,
    wide: bool = False,
) -> None:
    """Print ``data`` as JSON (without the admin channel's ``ok`` flag), or ``rows`` (one
    value per column of ``cols``) as a table of the columns ``wide`` selects."""
    if as_json:
        if isinstance(data, dict):
            data = {k: v for k, v in data.items() if k != "ok"}
        click.echo(json.dumps(data, indent=2, sort_keys=True))
        return
    picked = [i for i, c in enumerate(cols) if wide or not c.wide]
    shown = [cols[i] for i in picked]
    cells = [["-" if r[i] is None or r[i] == "" else str(r[i]) for i in picked] for r in rows]
    texts = [[c.header] + [r[k] for r in cells] for k, c in enumerate(shown)]
    widest = [max(cell_len(t) for t in column) for column in texts]
    # A row of the table takes its cells' widths plus 3 per column (padding, rule) plus 1.
    borders = 3 * len(shown) + 1
    out, widths = console, None
    if sum(widest) + borders > console.width:
        widths = _squeeze(shown, texts, widest, console.width - borders)
        if widths is None and wide:
            # Every column asked for and no room to keep the identifiers whole: the table
            # takes the width it needs (a terminal wraps its lines, `less -S` scrolls them).
            out = Console(width=sum(widest) + borders)
    t = Table(title=title, title_justify="left")
    for k, c in enumerate(shown):
        # "fold": a cell too long for its column continues on the next line, never elided.
        width = widths[k] if widths is not None else None
        t.add_column(c.header, overflow="fold", justify=c.justify, width=width)
    for row in cells:
        t.add_row(*row)
    out.print(t)


def _squeeze(
    cols: Sequence[Col], texts: list[list[str]], widest: list[int], room: int
) -> list[int] | None:
    """Each column's width in ``room``, narrower than its content: identifier columns their
    widest cell; the others at least their longest word (else their header's longest word,
    else 4 characters: their text folds), then an equal share of what is left, up to their
    widest cell. None when not even the identifiers fit."""
    words = [max(cell_len(w) for t in column for w in t.split() or [""]) for column in texts]
    heads = [max(cell_len(w) for w in c.header.split()) for c in cols]
    tiers = (words, [max(h, min(w, 4)) for h, w in zip(heads, words, strict=True)])
    for least in (*tiers, [min(w, 4) for w in words]):
        out = [widest[k] if c.ident else least[k] for k, c in enumerate(cols)]
        if sum(out) <= room:
            return _share(out, widest, [not c.ident for c in cols], room - sum(out))
    return None


def _share(out: list[int], widest: list[int], may_grow: list[bool], left: int) -> list[int]:
    """``out`` with ``left`` more characters given one at a time to the narrowest column that
    may grow and is narrower than its widest cell."""
    growing = [k for k in range(len(out)) if may_grow[k] and out[k] < widest[k]]
    for _ in range(left):
        if not growing:
            break
        k = min(growing, key=lambda k: out[k])
        out[k] += 1
        if out[k] == widest[k]:
            growing.remove(k)
    return out
