"""The options every long-running verb (worker, up, dev, serve) shares: logs and metrics."""

from __future__ import annotations

from typing import Annotated, Literal

import typer

_PANEL = "Observability"
LogLevel = Annotated[
    Literal["DEBUG", "INFO", "WARNING", "ERROR"],
    typer.Option("--log-level", case_sensitive=False, help="Log from this level up.", rich_help_panel=_PANEL),
]
LogFormat = Annotated[
    Literal["text", "json"],
    typer.Option(
        "--log-format", help="text, or json: one object per line with session ids.", rich_help_panel=_PANEL
    ),
]
MetricsPort = Annotated[
    int | None,
    typer.Option(
        "--metrics-port",
        metavar="PORT",
        help="Serve Prometheus metrics (Temporal's and AgentWolf's) on this port at /metrics.",
        rich_help_panel=_PANEL,
    ),
]


def worker_flags(metrics_port: int | None, log_level: str, log_format: str) -> list[str]:
    """The same choices as `python -m agentwolf.worker` flags (the local stack's worker), defaults
    left out: a worker a verb started implicitly (no flags) then counts as started with the defaults,
    so a plain `wolf up` does not restart it."""
    flags = [] if log_level.upper() == "INFO" else ["--log-level", log_level]
    flags += [] if log_format == "text" else ["--log-format", log_format]
    return flags + (["--metrics-port", str(metrics_port)] if metrics_port is not None else [])
