"""How every verb's help reads: values by upper-case names (`SESSION_ID`, `--cron EXPR`), a choice as
`[a|b]`, never Typer's types or braces (`{PROMPT}`, `<str>`, `<list[str]>`); a group's sub-verbs
listed with their first sentence whole (click cuts it at 45 characters)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from typer.core import TyperArgument, TyperCommand, TyperGroup, TyperOption
from typer.models import CommandInfo, TyperInfo

if TYPE_CHECKING:
    from typer._click.core import Context, Parameter  # typer's own click
    from typer._click.formatting import HelpFormatter

SHORT_HELP = 200
"""Characters of a verb's first sentence a group's help shows (click's default, 45, cut most)."""


def _metavar(param: Parameter) -> str | None:
    """The name a value is shown by: its own metavar, a choice's `[a|b]`, else its name in capitals."""
    if param.metavar is not None or not isinstance(param, TyperArgument | TyperOption):
        return param.metavar
    if isinstance(param, TyperOption) and (param.is_flag or param.count):
        return None
    choices = param.type_descriptor.choices if param.type_descriptor.is_choice else None
    if choices:
        return "[" + "|".join(str(getattr(c, "value", c)) for c in choices) + "]"
    return (param.name or "VALUE").upper()


class _Argument(TyperArgument):
    """An argument shown by its name alone, in the usage line (Typer writes `{SESSION_ID}`), its help
    and the CLI reference (Typer writes `SESSION_ID <str>`)."""

    def display_type_rich(self, ctx: Context) -> str | None:
        return None

    def _usage_display_name(self) -> str:
        name = self.metavar or ""
        return name if self.required else f"[{name}]"


class Command(TyperCommand):
    """A verb whose usage line and help show each value by its name."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        for param in self.params:
            param.metavar = _metavar(param)
            if type(param) is TyperArgument:
                param.__class__ = _Argument  # Typer builds its own class, with no hook to choose another


class Group(TyperGroup):
    """A group of verbs (`wolf config`, `wolf schedule`...) listing each with its first sentence whole."""

    def format_commands(self, ctx: Context, formatter: HelpFormatter) -> None:
        rows = [
            (name, command.get_short_help_str(limit=SHORT_HELP))
            for name in self.list_commands(ctx)
            if (command := self.get_command(ctx, name)) is not None and not command.hidden
        ]
        if rows:
            with formatter.section("Commands"):
                formatter.write_dl(rows)


def styled(info: CommandInfo | TyperInfo) -> None:
    """Make a verb (and a group's verbs, all the way down) build as `Command` and `Group`."""
    if isinstance(info, CommandInfo):
        info.cls = Command if info.cls in (None, TyperCommand) else info.cls
        return
    if not isinstance(info.cls, type) or info.cls is TyperGroup:  # unset: None or Typer's placeholder
        info.cls = Group
    if info.typer_instance is not None:
        subs: list[CommandInfo | TyperInfo] = [*info.typer_instance.registered_commands]
        for sub in [*subs, *info.typer_instance.registered_groups]:
            styled(sub)
