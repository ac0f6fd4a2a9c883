"""Where AgentWolf keeps local state: `$WOLF_HOME`, else `$XDG_DATA_HOME/agentwolf`."""

from __future__ import annotations

import os
from pathlib import Path


def data_dir() -> Path:
    base = os.environ.get("WOLF_HOME") or os.path.join(
        os.environ.get("XDG_DATA_HOME") or os.path.expanduser("~/.local/share"), "agentwolf"
    )
    path = Path(base)
    path.mkdir(parents=True, exist_ok=True)
    return path
