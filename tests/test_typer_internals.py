"""The typer internals `wolf`'s lazy verb group rests on (agentwolf/cli/lazy.py): their shape on the
installed typer, the upper bound that keeps an untried typer out, and typer's documented way that
`wolf` falls back to when they do not fit."""

from __future__ import annotations

import subprocess
import sys
import tomllib
from pathlib import Path

import typer
from packaging.requirements import Requirement

from agentwolf.cli import LAZY
from agentwolf.cli.lazy import TESTED_TYPER, _builds_a_verb

ROOT = Path(__file__).resolve().parents[1]


def test_the_private_names_the_lazy_group_uses_exist() -> None:
    import typer.core
    import typer.main
    import typer.models

    for module, names in [
        (typer.main, ["get_command_from_info", "get_command_name", "get_group_from_info"]),
        (typer.main, ["solve_typer_info_defaults"]),
        (typer.core, ["TyperCommand", "TyperGroup"]),
        (typer.models, ["CommandInfo", "TyperInfo"]),
    ]:
        assert all(hasattr(module, name) for name in names), module.__name__
    assert _builds_a_verb()
    assert LAZY is not None  # the installed typer gets the lazy group


def test_typer_is_bounded_above_the_releases_tried() -> None:
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    spec = next(Requirement(d) for d in project["dependencies"] if Requirement(d).name == "typer")
    assert any(s.operator == "<" for s in spec.specifier), "typer needs an upper bound"
    assert typer.__version__ in spec.specifier and typer.__version__ in TESTED_TYPER


def test_wolf_falls_back_to_plain_typer_when_the_internals_do_not_fit() -> None:
    script = (
        "import sys\n"
        "sys.modules['agentwolf.cli.lazy'] = None\n"  # its typer imports fail (a release moved them)
        "import agentwolf.cli as cli\n"
        "assert cli.LAZY is None\n"
        "cli.app(['--help'])\n"
    )
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120)
    assert "status" in done.stdout and "quotas" in done.stdout, done.stderr
    verbs = [line.split()[0] for line in done.stdout.splitlines() if line.startswith("  ") and line.strip()]
    assert "limits" not in verbs  # the old verb's name stays hidden
