"""`wolf`'s verbs imported and built on first use, on typer's internals (`typer.main`'s builders,
`typer.core`'s classes, `typer.models`' infos): they are not typer's public API, so the group is
used only on the typer releases it was tested on, or on another once a start-up check built a verb
and a listing through them (cli/__init__.py falls back to typer's documented way otherwise)."""

from __future__ import annotations

import importlib
import inspect
import logging
from typing import TYPE_CHECKING, Any

import typer
from typer.core import TyperCommand, TyperGroup
from typer.main import get_command_from_info, get_command_name, get_group_from_info, solve_typer_info_defaults
from typer.models import CommandInfo, TyperInfo

from agentwolf.cli.help import Group as StyledGroup
from agentwolf.cli.help import styled

if TYPE_CHECKING:
    from typer._click.core import Command, Context  # typer's own click
    from typer._click.formatting import HelpFormatter

log = logging.getLogger(__name__)

TESTED_TYPER = ("0.29.2",)
"""typer releases this group was tested on; on another it must pass `_builds_a_verb` first."""


def lazy_group(modules: tuple[str, ...], panels: dict[str, str], short_help: int) -> type[TyperGroup] | None:
    """The group class for `wolf`, over the verb `modules` of agentwolf.cli (each verb listed under
    its module's panel, its short help cut at `short_help` characters); None when typer's internals
    do not fit this release."""

    class Group(StyledGroup):
        """Verbs imported and built on first use (building all 40 from their signatures was most of
        `wolf --help`'s start-up, importing all their modules a tenth of `wolf status`'s); plain help
        (rich's rendering tripled start-up time) that still groups verbs by their help panel and does
        not cut their descriptions; choice errors without pydantic's "Value error, "."""

        def __init__(self, *args: Any, **kwargs: Any) -> None:
            super().__init__(*args, **kwargs)
            self.unbuilt: dict[str, CommandInfo | TyperInfo] = {}
            self.unread = list(modules)

        def _read(self, until: str | None = None) -> None:
            """Import verb modules in order until one holds `until` (all of them when None), listing
            their verbs unbuilt: with their help, for `wolf --help` and suggestions for typos."""
            while self.unread and (until is None or until not in self.commands):
                name = self.unread.pop(0)
                module = importlib.import_module(f"agentwolf.cli.{name}")
                for info in [*module.app.registered_commands, *module.app.registered_groups]:
                    info.rich_help_panel = info.rich_help_panel or panels[name]
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
            by_panel: dict[str, list[tuple[str, str]]] = {}
            for name, command in self.commands.items():  # unbuilt verbs list from their docstrings
                if not command.hidden:
                    panel = getattr(command, "rich_help_panel", None) or "Commands"
                    by_panel.setdefault(panel, []).append(
                        (name, command.get_short_help_str(limit=short_help))
                    )
            for panel, rows in by_panel.items():
                with formatter.section(panel):
                    formatter.write_dl(rows)

        def invoke(self, ctx: Context) -> Any:
            try:
                return super().invoke(ctx)
            except typer.BadParameter as exc:
                exc.message = exc.message.removeprefix("Value error, ")
                raise

    return Group if _fits() else None


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


def _fits() -> bool:
    """A tested typer, or one on which a verb, a group and their listings build as they should."""
    if typer.__version__ in TESTED_TYPER:
        return True
    try:
        fits = _builds_a_verb()
    except Exception as exc:  # whatever the release changed: typer's documented way is the safe one
        log.debug("typer's internals do not fit: %r", exc)
        fits = False
    if not fits:
        log.info(
            "typer %s: every verb is built at start (tested: %s)", typer.__version__, ", ".join(TESTED_TYPER)
        )
    return fits


def _builds_a_verb() -> bool:
    def probe(count: int = 1) -> None:
        """Probe a thing."""

    sub = typer.Typer(name="probes", help="Probes.")
    sub.command()(probe)
    command = CommandInfo(callback=probe, rich_help_panel="Panel")
    group = TyperInfo(sub, name="probes")
    built, listed = _build(command), _listing("probe", command)
    return (
        [p.name for p in built.params] == ["count"]
        and listed.help == "Probe a thing."
        and getattr(listed, "rich_help_panel", None) == "Panel"
        and _listing("probes", group).help == "Probes."
        and "probe" in getattr(_build(group), "commands", {})
    )
