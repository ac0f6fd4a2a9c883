"""Manifest models, YAML loading, placeholders, model aliases, config identity, the worker policy:
what every layer above reads, importing nothing of them."""

from agentwolf.config.aliases import AliasError, resolve_model
from agentwolf.config.loading import ManifestError, load_manifest, parse_manifest
from agentwolf.config.manifest import AgentConfig, Manifest, McpServerConfig

__all__ = [
    "AgentConfig",
    "AliasError",
    "Manifest",
    "ManifestError",
    "McpServerConfig",
    "load_manifest",
    "parse_manifest",
    "resolve_model",
]
