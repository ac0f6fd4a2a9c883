"""`wolf`: submit, follow, steer and interrupt agent sessions; run workers; the embedded local stack.

Exit codes: 0 ok, 1 the session failed, 2 usage or config error, 3 Temporal or a worker unreachable,
130 interrupted (Ctrl-C).

Each module of this package holds the verbs of one concern on its own `typer.Typer()`, merged into
`app` below. To add verbs: write `agentwolf/cli/<concern>.py` with `app = typer.Typer()` and
commands decorated `@app.command()` then `@verb` (common.py: an async function; a `conn: Connection`
parameter brings Temporal's connection options), give each docstring an `Example:` line, import
heavy modules inside the verb (`wolf --help` loads every verb module), and list the module in
VERB_MODULES and PANELS. A verb's module is imported when that verb runs (modules before it in
VERB_MODULES too), and Typer builds the verb's command (its options, from the signature) only when
that verb runs or shows its own help: `wolf --help` lists verbs from their docstrings alone.
That lazy group is built on typer's internals (cli/lazy.py); on a typer release they do not fit, `wolf`
is built the way typer documents (every verb module imported and added), slower to start.
"""

from __future__ import annotations

import importlib
import sys
from typing import TYPE_CHECKING, Annotated

import typer

from agentwolf.cli.help import SHORT_HELP, Group

if TYPE_CHECKING:
    from typer.core import TyperGroup

VERB_MODULES = (
    "sessions",
    "interactive",
    "forks",
    "workspaces",
    "configs",
    "evals",
    "jobs",
    "stack",
    "deploy",
    "payloads",
    "memory",
    "mcp",
    "editor",
    "usage",
    "quotas",
)
"""The modules of agentwolf.cli holding verbs, imported in this order until the verb asked for is found
(`wolf status` loads sessions alone); `wolf --help` and a misspelt verb load them all."""
PANELS = {  # `wolf --help` groups each module's verbs under its heading (a verb may name its own)
    "sessions": "Sessions",
    "interactive": "Sessions",
    "forks": "Sessions",
    "workspaces": "Sessions",
    "configs": "Configs and jobs",
    "evals": "Configs and jobs",
    "jobs": "Configs and jobs",
    "stack": "Running AgentWolf",
    "deploy": "Running AgentWolf",
    "payloads": "Running AgentWolf",
    "memory": "Sessions",
    "mcp": "Front ends",
    "editor": "Front ends",
    "usage": "Spending",
    "quotas": "Spending",
}

HELP = """Durable AI agent sessions on Temporal: submit, follow, steer and interrupt them; run workers;
the embedded local stack.

Exit codes: 0 ok, 1 the session failed, 2 usage or config error, 3 Temporal or a worker unreachable,
130 interrupted (Ctrl-C)."""


def _lazy_group() -> type[TyperGroup] | None:
    """The group that builds verbs on first use, when this typer's internals fit it."""
    try:
        from agentwolf.cli.lazy import lazy_group
    except ImportError:  # a typer release that moved what it imports
        return None
    return lazy_group(VERB_MODULES, PANELS, SHORT_HELP)


LAZY = _lazy_group()
app = typer.Typer(
    cls=LAZY or Group,
    help=HELP,
    no_args_is_help=True,
    context_settings={"help_option_names": ["-h", "--help"]},
    rich_markup_mode=None,  # plain help: rendering it with rich tripled `wolf --help`'s start-up time
    pretty_exceptions_enable=False,
)


def _version(show: bool) -> None:
    if show:
        from importlib.metadata import version

        print(f"wolf {version('agentwolf')}")
        raise typer.Exit()


if LAZY is None:  # typer's documented way: each module's verbs added to `app` (its own panels lost)
    for _name in VERB_MODULES:
        app.add_typer(importlib.import_module(f"agentwolf.cli.{_name}").app)


@app.callback()
def main(
    version: Annotated[
        bool, typer.Option("--version", callback=_version, is_eager=True, help="Print the version and exit.")
    ] = False,
) -> None:
    """Options before any verb."""


if __name__ == "__main__":
    app(sys.argv[1:])
