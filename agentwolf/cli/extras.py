"""The optional extras a verb needs, checked by importing what the verb imports later: one sentence
naming the `pip install` to run instead of a traceback from deep inside a front end."""

from __future__ import annotations

import importlib

from agentwolf.cli.console import Exit

EXTRA_MODULES = {
    "serve": ("starlette", "uvicorn", "sse_starlette", "ag_ui", "jinja2"),
    "a2a": ("a2a",),
    "otel": ("opentelemetry.sdk.trace", "opentelemetry.exporter.otlp.proto.http.trace_exporter"),
}
"""The modules of each extra's packages (pyproject.toml's optional dependencies; a test keeps them equal)."""


def missing(extra: str) -> list[str]:
    """The modules of `extra` that cannot be imported."""
    absent = []
    for module in EXTRA_MODULES[extra]:
        try:
            importlib.import_module(module)
        except ImportError:
            absent.append(module)
    return absent


def install_hint(extra: str) -> str:
    return f"pip install 'agentwolf[{extra}]'"


def require(extra: str, verb: str) -> None:
    """Exit 2 with one sentence when `extra` is not installed."""
    if absent := missing(extra):
        raise Exit(2, f"wolf {verb} needs its extra: {install_hint(extra)} ({', '.join(absent)} missing)")


def extra_of(module: str) -> str | None:
    """The extra that provides `module` (a ModuleNotFoundError's name), if one does."""
    top = module.split(".")[0]
    return next((e for e, names in EXTRA_MODULES.items() if any(n.split(".")[0] == top for n in names)), None)
