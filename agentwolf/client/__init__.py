"""The Python SDK: `WolfClient` and what it needs (configs, jobs, schedules, followers, usage).

`WolfClient` loads on first use, so importing the package (as the CLI's `--help` path does) costs
neither Temporal's client nor pydantic-ai."""

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
