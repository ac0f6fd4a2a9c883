"""A manifest as an operator may see it: placeholders resolved, secrets masked."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from agentwolf.config.manifest import Manifest
from agentwolf.config.placeholders import MissingVariable, resolve

MASK = "****"


def masked(manifest: Manifest, env: Mapping[str, str] | None = None) -> dict[str, Any]:
    """Provider API keys, MCP server env values and headers are masked; every other string is
    resolved (an unset variable shows as `<unset VAR>`)."""
    data = manifest.model_dump(mode="json")
    host = data["host"]
    for provider in host["models"]["providers"].values():
        if provider.get("api_key"):
            provider["api_key"] = MASK
    for server in host["mcp_servers"].values():
        server["env"] = dict.fromkeys(server["env"], MASK)
        server["headers"] = dict.fromkeys(server["headers"], MASK)
    return _resolve_all(data, env)


def _resolve_all(value: Any, env: Mapping[str, str] | None) -> Any:
    if isinstance(value, dict):
        return {k: _resolve_all(v, env) for k, v in value.items()}
    if isinstance(value, list):
        return [_resolve_all(v, env) for v in value]
    if isinstance(value, str) and value != MASK:
        try:
            return resolve(value, env)
        except MissingVariable as exc:
            return f"<unset {exc.args[0]}>"
    return value
