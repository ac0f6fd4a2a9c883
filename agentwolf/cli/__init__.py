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
"""

from __future__ import annotations

import importlib
import inspect
import sys
from typing import TYPE_CHECKING, Annotated, Any

import typer
from typer.core import TyperCommand
from typer.main import get_command_from_info, get_command_name, get_group_from_info, solve_typer_info_defaults
from typer.models import CommandInfo, TyperInfo

from agentwolf.cli.help import SHORT_HELP, Group, styled

if TYPE_CHECKING:
    from typer._click.core import Command, Context  # typer's own click
    from typer._click.formatting import HelpFormatter

VERB_MODULES = (
    "sessions",
    "interactive",
    "forks",
    "configs",
    "evals",
    "jobs",
    "stack",
    "deploy",
    "payloads",
    "mcp",
    "editor",
    "usage",
    "limits",
)
"""The modules of agentwolf.cli holding verbs, imported in this order until the verb asked for is found
(`wolf status` loads sessions alone); `wolf --help` and a misspelt verb load them all."""
PANELS = {  # `wolf --help` groups each module's verbs under its heading (a verb may name its own)
    "sessions": "Sessions",
    "interactive": "Sessions",
    "forks": "Sessions",
    "configs": "Configs and jobs",
    "evals": "Configs and jobs",
    "jobs": "Configs and jobs",
    "stack": "Running AgentWolf",
    "deploy": "Running AgentWolf",
    "payloads": "Running AgentWolf",
    "mcp": "Front ends",
    "editor": "Front ends",
    "usage": "Spending",
    "limits": "Spending",
}

HELP = """Durable AI agent sessions on Temporal: submit, follow, steer and interrupt them; run workers;
the embedded local stack.

Exit codes: 0 ok, 1 the session failed, 2 usage or config error, 3 Temporal or a worker unreachable,
130 interrupted (Ctrl-C)."""


class _Group(Group):
    """Verbs imported and built on first use (building all 40 from their signatures was most of
    `wolf --help`'s start-up, importing all their modules a tenth of `wolf status`'s); plain help
    (rich's rendering tripled start-up time) that still groups verbs by their help panel and does
    not cut their descriptions; choice errors without pydantic's "Value error, "."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.unbuilt: dict[str, CommandInfo | TyperInfo] = {}
        self.unread = list(VERB_MODULES)

    def _read(self, until: str | None = None) -> None:
        """Import verb modules in order until one holds `until` (all of them when None), listing
        their verbs unbuilt: with their help, for `wolf --help` and suggestions for typos."""
        while self.unread and (until is None or until not in self.commands):
            name = self.unread.pop(0)
            module = importlib.import_module(f"agentwolf.cli.{name}")
            for info in [*module.app.registered_commands, *module.app.registered_groups]:
                info.rich_help_panel = info.rich_help_panel or PANELS[name]
                verb = info.name or get_command_name(info.callback.__name__)
                self.unbuilt[verb] = info
                self.commands[verb] = _listing(verb, info)

    def get_command(self, ctx: Context, cmd_name: str) -> Command | None:
        self._read(until=cmd_name)  # a verb not found reads them all: typer suggests from the lot
        if (info := self.unbuilt.pop(cmd_name, None)) is not None:
            self.commands[cmd_name] = _build(info)
        return self.commands.get(cmd_name)

    def list_commands(self, ctx: Context) -> list[str]:
        self._read()
        return super().list_commands(ctx)

    def format_commands(self, ctx: Context, formatter: HelpFormatter) -> None:
        self._read()
        panels: dict[str, list[tuple[str, str]]] = {}
        for name, command in self.commands.items():  # unbuilt verbs list from their docstrings
            if not command.hidden:
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


def _build(info: CommandInfo | TyperInfo) -> Command:
    """The verb's command (or command group) as Typer builds it, its help as help.py shows it."""
    styled(info)
    if isinstance(info, TyperInfo):
        return get_group_from_info(
            info, pretty_exceptions_short=True, suggest_commands=True, rich_markup_mode=None
        )
    return get_command_from_info(info, pretty_exceptions_short=True, rich_markup_mode=None)


def _listing(name: str, info: CommandInfo | TyperInfo) -> Command:
    """A verb not built yet, as `wolf --help` lists it: a command with its help and no options, so its
    short help is cut exactly as the built command's would be."""
    if isinstance(info, TyperInfo):
        info = solve_typer_info_defaults(info)
        doc = info.help
    else:
        doc = info.help or inspect.getdoc(info.callback)
    return TyperCommand(
        name,
        help=doc,
        short_help=info.short_help,
        hidden=bool(info.hidden),
        rich_help_panel=info.rich_help_panel,
    )


app = typer.Typer(
    cls=_Group,
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


@app.callback()
def main(
    version: Annotated[
        bool, typer.Option("--version", callback=_version, is_eager=True, help="Print the version and exit.")
    ] = False,
) -> None:
    """Options before any verb."""


if __name__ == "__main__":
    app(sys.argv[1:])
