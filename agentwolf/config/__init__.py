"""Manifest models, YAML loading, placeholders, model aliases, config identity, the worker policy:
what every layer above reads, importing nothing of them.

The names below load on first use: building the manifest models costs about 150 ms, which
`wolf status` and other programs that only read sessions never pay (tests/test_client_imports.py)."""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from agentwolf.config.aliases import AliasError as AliasError
    from agentwolf.config.aliases import resolve_model as resolve_model
    from agentwolf.config.loading import ManifestError as ManifestError
    from agentwolf.config.loading import load_manifest as load_manifest
    from agentwolf.config.loading import parse_manifest as parse_manifest
    from agentwolf.config.manifest import AgentConfig as AgentConfig
    from agentwolf.config.manifest import Manifest as Manifest
    from agentwolf.config.manifest import McpServerConfig as McpServerConfig

_HOMES = {
    "AgentConfig": "manifest",
    "AliasError": "aliases",
    "Manifest": "manifest",
    "ManifestError": "loading",
    "McpServerConfig": "manifest",
    "load_manifest": "loading",
    "parse_manifest": "loading",
    "resolve_model": "aliases",
}

__all__ = sorted(_HOMES)


def __getattr__(name: str) -> Any:
    home = _HOMES.get(name)
    if home is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return getattr(importlib.import_module(f"{__name__}.{home}"), name)
