"""Small, seeded runs of bench/chaos.py: worker SIGKILLs and MCP server kills at random points, and
worker SIGKILLs around continue-as-new, during approval waits and during a local-activity tool call."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import pytest

CHAOS = Path(__file__).resolve().parents[2] / "bench" / "chaos.py"


def _chaos():
    spec = importlib.util.spec_from_file_location("chaos", CHAOS)
    assert spec and spec.loader
    chaos = importlib.util.module_from_spec(spec)
    sys.modules["chaos"] = chaos
    spec.loader.exec_module(chaos)
    return chaos


@pytest.mark.timeout(600)
async def test_chaos_seeded():
    report = await _chaos().run_chaos(iterations=3, seed=7, sessions=2, steps=3, scenarios=("steps",))
    assert report.problems == []
    assert report.completed == report.sessions == 6
    assert sum(report.faults.values()) == 3


@pytest.mark.timeout(600)
async def test_chaos_worker_killed_around_continue_as_new_and_during_approval_waits():
    """One iteration each: sessions that continue as new after every turn lose their worker just after
    a turn's last model answer; sessions with `confirm` tools lose it while a call waits for approval
    (approvals arrive by signal, some while no worker runs). Nothing lost, nothing twice."""
    report = await _chaos().run_chaos(
        iterations=2, seed=11, sessions=2, steps=3, scenarios=("continue_as_new", "approval"), rotate=True
    )
    print(f"worker kills landed: {dict(report.landed)}")
    assert report.problems == []
    assert report.completed == report.sessions == 4
    assert report.scenarios == {"continue_as_new": 1, "approval": 1}
    assert report.faults == {"worker": 2} and sum(report.landed.values()) == 2
    assert report.lost == report.duplicated == report.over_guarantee == 0


@pytest.mark.timeout(600)
async def test_chaos_worker_killed_during_a_local_activity_tool_call():
    """One iteration: sessions call `record` (a side effect, not annotated) and `lookup` (read-only, known
    fast: a local activity) in parallel; the worker dies while a `lookup` runs as a local activity. That
    call may run again (the guarantee for tools safe to repeat), `record` never runs as a local
    activity and keeps its guarantee, and nothing is lost or doubled."""
    report = await _chaos().run_chaos(
        iterations=1, seed=5, sessions=2, steps=3, scenarios=("local_activity",)
    )
    print(
        f"worker kills landed: {dict(report.landed)}; repeat-safe calls run again: {report.reran_repeat_safe}"
    )
    assert report.problems == []
    assert report.completed == report.sessions == 2
    assert report.faults == {"worker": 1}
    assert report.landed == {"local_activity: during a local activity": 1}
    assert report.local_side_effects == report.over_guarantee == report.lost == report.duplicated == 0
