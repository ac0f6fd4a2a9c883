"""Tests that need something outside Python (node packages, an extra): skipped where it is missing,
but a failure in CI (CI=true), which installs everything, so a quiet skip cannot hide a test that
never ran."""

from __future__ import annotations

import importlib
import os
from types import ModuleType
from typing import NoReturn

import pytest


def in_ci() -> bool:
    return os.environ.get("CI", "").lower() in ("true", "1")


def missing(what: str) -> NoReturn:
    """Skip the current test (or module) for lack of `what`; fail instead in CI."""
    if in_ci():
        pytest.fail(f"needs {what}, which CI installs: it is missing", pytrace=False)
    pytest.skip(f"needs {what}", allow_module_level=True)


def import_or_skip(module: str, what: str) -> ModuleType:
    """`pytest.importorskip`, failing in CI."""
    try:
        return importlib.import_module(module)
    except ImportError:
        missing(what)
