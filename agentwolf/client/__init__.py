"""Layer 6: the Python client (`WolfClient`) and the `wolf` CLI.

`WolfClient` loads on first use, so `wolf --help` does not import Temporal's client or pydantic-ai."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from agentwolf.client.wolf_client import WolfClient, connect

__all__ = ["WolfClient", "connect"]


def __getattr__(name: str) -> Any:
    if name in __all__:
        from agentwolf.client import wolf_client

        return getattr(wolf_client, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
