"""Where a verb's agent config comes from: `--config` / WOLF_CONFIG (a registry name or a manifest
file), else ./wolf.yaml, else the example config bundled with the package."""

from __future__ import annotations

import os
from pathlib import Path
from typing import TYPE_CHECKING, Any

from agentwolf.cli.console import Exit

if TYPE_CHECKING:
    from agentwolf.config.manifest import Manifest

BUNDLED_CONFIG = Path(__file__).resolve().parents[1] / "examples" / "wolf.yaml"
"""The example config and its skills ship inside the package, so `wolf submit` works from any folder."""


def config_path(config: Path | None) -> Path:
    if config is not None:
        return config
    if env := os.environ.get("WOLF_CONFIG"):
        return Path(env)
    return Path("wolf.yaml") if Path("wolf.yaml").exists() else BUNDLED_CONFIG


def config_source(config: str | None) -> Manifest | str:
    """`--config` (else WOLF_CONFIG): a registry config name, or a manifest loaded from a file.

    Registry names have no '.' or '/'; a path that exists is always a file."""
    from agentwolf.config.loading import load_manifest
    from agentwolf.workflows.types import is_config_name

    value = config or os.environ.get("WOLF_CONFIG")
    if value and is_config_name(value) and not Path(value).exists():
        return value
    return load_manifest(config_path(Path(value) if value else None))


def registry_ref(target: str | None) -> tuple[str, int | None] | None:
    """`NAME` or `NAME@VERSION` (a registry config), else None (a manifest file)."""
    from agentwolf.workflows.types import is_config_name

    value = target or os.environ.get("WOLF_CONFIG")
    if not value or Path(value).exists():
        return None
    name, _, version = value.partition("@")
    if not is_config_name(name) or (version and not version.isdigit()):
        return None
    return name, int(version) if version else None


def source_args(source: Manifest | str) -> dict[str, Any]:
    """`WolfClient.start_session`'s keyword for a registry name or a manifest."""
    return {"config_name": source} if isinstance(source, str) else {"manifest": source}


DEFAULT_AGENT = "assistant"


def pick_agent(manifest: Manifest | None, agent: str | None) -> str:
    """`--agent`, else the config's only agent (or team), else `assistant`: a one-agent manifest of
    one's own needs no `-a`. An agent the manifest lacks is an error naming those it has; a registry
    config (None) is checked where it is read."""
    from agentwolf.config.suggest import did_you_mean, listing

    if manifest is None:
        return agent or DEFAULT_AGENT
    known = [*manifest.agents, *manifest.teams]
    chosen = agent or (known[0] if len(known) == 1 else DEFAULT_AGENT)
    if chosen not in known:
        what = (
            f"unknown agent {chosen!r}{did_you_mean(chosen, known)}"
            if agent
            else "name an agent with --agent"
        )
        raise Exit(2, f"{what} (agents and teams in this config: {listing(known)})")
    return chosen
