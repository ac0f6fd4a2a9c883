"""Tables of the CLI's listing verbs (`list`, `usage`, `config list`, `config history`): a rich
table on a terminal; piped, tab-separated lines with a header, whole cells, one row per line (a
rich table sized for 80 columns would cut ids and wrap dates)."""

from __future__ import annotations

import sys
from collections.abc import Sequence

from agentwolf.cli.console import out
from agentwolf.cli.render import inert


def print_table(header: Sequence[str], rows: Sequence[Sequence[str]]) -> None:
    """Print `rows` under `header`; cells are session data: made inert here."""
    cells = [[inert(cell) for cell in row] for row in rows]
    if not sys.stdout.isatty():
        for row in (header, *cells):
            print("\t".join(cell.replace("\t", " ") for cell in row))
        return
    from rich.table import Table

    table = Table(*header, box=None)
    table.columns[0].no_wrap = True
    for row in cells:
        table.add_row(*row)
    out().print(table)
