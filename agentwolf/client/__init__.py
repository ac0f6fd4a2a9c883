"""Layer 6: the Python client (`WolfClient`) and the `wolf` CLI."""

from agentwolf.client.wolf_client import WolfClient, connect

__all__ = ["WolfClient", "connect"]
