"""The message that carries a new config version to its running sessions. Apart from types.py
because it holds a whole manifest, whose models clients that only read a session never build."""

from __future__ import annotations

from pydantic import BaseModel

from agentwolf.config.manifest import Manifest


class ConfigUpdate(BaseModel):
    """A new version of a named config, sent to its running sessions (applied at a turn boundary)."""

    name: str
    version: int
    manifest: Manifest
