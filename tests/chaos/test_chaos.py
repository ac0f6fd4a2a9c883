"""A small, seeded run of bench/chaos.py: worker SIGKILLs and MCP server kills at random points."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import pytest

CHAOS = Path(__file__).resolve().parents[2] / "bench" / "chaos.py"


@pytest.mark.timeout(600)
async def test_chaos_seeded():
    spec = importlib.util.spec_from_file_location("chaos", CHAOS)
    assert spec and spec.loader
    chaos = importlib.util.module_from_spec(spec)
    sys.modules["chaos"] = chaos
    spec.loader.exec_module(chaos)
    report = await chaos.run_chaos(iterations=3, seed=7, sessions=2, steps=3)
    assert report.problems == []
    assert report.completed == report.sessions == 6
    assert sum(report.faults.values()) == 3
