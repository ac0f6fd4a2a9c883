"""`wolf`: submit, follow, steer and interrupt agent sessions; run workers; the embedded local stack.

Exit codes: 0 ok, 1 the session failed, 2 usage or config error, 3 Temporal or a worker unreachable.

Each module of this package holds the verbs of one concern on its own `typer.Typer()`, merged into
`app` below. To add verbs: write `agentwolf/cli/<concern>.py` with `app = typer.Typer()` and
commands decorated `@app.command()` then `@verb` (common.py: an async function; a `conn: Connection`
parameter brings Temporal's connection options), give each docstring an `Example:` line, import
heavy modules inside the verb (`wolf --help` loads every verb module), and list the module in
VERB_MODULES.
"""

from __future__ import annotations

import sys
from typing import TYPE_CHECKING, Annotated, Any

import typer
from typer.core import TyperGroup

if TYPE_CHECKING:
    from typer._click.core import Context  # typer's own click, whose Context its commands take
    from typer._click.formatting import HelpFormatter

from agentwolf.cli import (
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
PANELS = {  # `wolf --help` groups each module's verbs under its heading (a verb may name its own)
    sessions: "Sessions",
    interactive: "Sessions",
    configs: "Configs and jobs",
    jobs: "Configs and jobs",
    stack: "Running AgentWolf",
    payloads: "Running AgentWolf",
    mcp: "Front ends",
    editor: "Front ends",
    usage: "Spending",
    limits: "Spending",
}

SHORT_HELP = 200
"""Characters of a verb's first sentence `wolf --help` shows (click's default, 45, cut most)."""

HELP = """Durable AI agent sessions on Temporal: submit, follow, steer and interrupt them; run workers;
the embedded local stack.

Exit codes: 0 ok, 1 the session failed, 2 usage or config error, 3 Temporal or a worker unreachable."""


class _Group(TyperGroup):
    """Plain help (rich's rendering tripled start-up time) that still groups verbs by their help
    panel and does not cut their descriptions; choice errors without pydantic's "Value error, "."""

    def format_commands(self, ctx: Context, formatter: HelpFormatter) -> None:
        panels: dict[str, list[tuple[str, str]]] = {}
        for name in self.list_commands(ctx):
            command = self.get_command(ctx, name)
            if command is not None and not command.hidden:
                panel = getattr(command, "rich_help_panel", None) or "Commands"
                panels.setdefault(panel, []).append((name, command.get_short_help_str(limit=SHORT_HELP)))
        for panel, rows in panels.items():
            with formatter.section(panel):
                formatter.write_dl(rows)

    def invoke(self, ctx: Context) -> Any:
        try:
            return super().invoke(ctx)
        except typer.BadParameter as exc:
            exc.message = exc.message.removeprefix("Value error, ")
            raise


app = typer.Typer(
    cls=_Group,
    help=HELP,
    no_args_is_help=True,
    context_settings={"help_option_names": ["-h", "--help"]},
    rich_markup_mode=None,  # plain help: rendering it with rich tripled `wolf --help`'s start-up time
    pretty_exceptions_enable=False,
)
for module in VERB_MODULES:
    for info in [*module.app.registered_commands, *module.app.registered_groups]:
        info.rich_help_panel = info.rich_help_panel or PANELS[module]
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
