"""`wolf`: submit, follow, steer and interrupt agent sessions; run workers; the embedded local stack.

Exit codes: 0 ok, 1 the session failed, 2 usage or config error, 3 Temporal or a worker unreachable.

Each module of this package holds the verbs of one concern on its own `typer.Typer()`, merged into
`app` below. To add verbs: write `agentwolf/client/cli/<concern>.py` with `app = typer.Typer()` and
commands decorated `@app.command()` then `@verb` (common.py: an async function; a `conn: Connection`
parameter brings Temporal's connection options), give each docstring an `Example:` line, import
heavy modules inside the verb (`wolf --help` loads every verb module), and list the module in
VERB_MODULES.
"""

from __future__ import annotations

import sys
from typing import Annotated

import typer

from agentwolf.client.cli import (
    configs,
    editor,
    interactive,
    jobs,
    limits,
    mcp,
    payloads,
    sessions,
    stack,
    usage,
)

VERB_MODULES = (sessions, interactive, configs, jobs, stack, payloads, mcp, editor, usage, limits)

HELP = """Durable AI agent sessions on Temporal: submit, follow, steer and interrupt them; run workers;
the embedded local stack.

Exit codes: 0 ok, 1 the session failed, 2 usage or config error, 3 Temporal or a worker unreachable."""

app = typer.Typer(
    help=HELP,
    no_args_is_help=True,
    context_settings={"help_option_names": ["-h", "--help"]},
    rich_markup_mode=None,  # plain help: rendering it with rich tripled `wolf --help`'s start-up time
    pretty_exceptions_enable=False,
)
for module in VERB_MODULES:
    app.add_typer(module.app)


def _version(show: bool) -> None:
    if show:
        from importlib.metadata import version

        print(f"wolf {version('agentwolf')}")
        raise typer.Exit()


@app.callback()
def main(
    version: Annotated[
        bool, typer.Option("--version", callback=_version, is_eager=True, help="Print the version and exit.")
    ] = False,
) -> None:
    """Options before any verb."""


if __name__ == "__main__":
    app(sys.argv[1:])
