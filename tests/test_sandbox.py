"""Workflow code runs in Temporal's sandbox: a clock, random or I/O call in it fails the workflow task
instead of silently breaking replay. Only pure-data modules are passed through."""

from __future__ import annotations

import pkgutil

import agentwolf.workflows
from agentwolf.worker.main import SANDBOX


def _passed_through(module: str) -> bool:
    names = SANDBOX.restrictions.passthrough_modules
    return any(module == name or module.startswith(name + ".") for name in names)


def test_workflow_modules_are_sandboxed():
    workflow_code = [f"agentwolf.workflows.{m.name}" for m in pkgutil.iter_modules(agentwolf.workflows.__path__)]
    assert {"agentwolf.workflows.session", "agentwolf.workflows.registry", "agentwolf.workflows.stream"} <= set(workflow_code)
    assert [m for m in workflow_code if m != "agentwolf.workflows.types" and _passed_through(m)] == []

