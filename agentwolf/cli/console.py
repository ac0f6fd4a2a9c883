"""The `wolf` program's consoles and its one way to fail: what every CLI module prints through.

Its own module so that the verb machinery (common.py), the connection options and the error
explanations can all import it at the top: it imports nothing of the CLI."""

from __future__ import annotations

import functools
import os
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from rich.console import Console


class Exit(Exception):
    """A verb's failure as the sentence to print and the exit code to leave with."""

    def __init__(self, code: int, message: str) -> None:
        super().__init__(message)
        self.code = code


def _console(stderr: bool) -> Console:
    from rich.console import Console

    # No markup, highlighting or emoji codes (`:smile:`) unless a line asks: session text prints as it is.
    return Console(
        stderr=stderr,
        no_color=bool(os.environ.get("NO_COLOR")) or None,
        highlight=False,
        soft_wrap=True,
        markup=False,
        emoji=False,
    )


@functools.cache
def out() -> Console:
    return _console(stderr=False)


@functools.cache
def err() -> Console:
    return _console(stderr=True)


def literal(text: str) -> str:
    """Session or server text inside a markup line: its `[` is not markup, its controls are shown,
    not sent."""
    from rich.markup import escape

    from agentwolf.cli.render import inert

    return escape(inert(text))


def fail(message: str, code: int) -> int:
    err().print(f"[red]error:[/red] {literal(message)}", markup=True)
    return code
