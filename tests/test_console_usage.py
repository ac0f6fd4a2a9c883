"""The usage page's chart and budgets on sessions as visibility lists them (no server: the browser test
in test_console.py checks them against `wolf usage --json`): every session lands in the bar of the
hour or day it started, the bars add up to the report's totals, groups past six are drawn as
"others", and sessions at 80 % of their session budget or past it are marked, the fullest first."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import cast

from temporalio.client import Client, WorkflowExecution, WorkflowExecutionStatus
from temporalio.common import SearchAttributePair, TypedSearchAttributes

from agentwolf.access import Principal
from agentwolf.client.usage import Spending, usage_report
from agentwolf.protocols.auth import ApiKeys
from agentwolf.protocols.console import budgets, usage_chart
from agentwolf.protocols.served import Served
from agentwolf.workflows.types import AGENT_ATTR, TENANT_ATTR, Counters, Usage
from tests.conftest import make_manifest

NOW = datetime(2026, 12, 2, 10, 30, tzinfo=UTC)


def spent(sid: str, agent: str, started: datetime, tokens: int, usd: float | None) -> Spending:
    attrs = TypedSearchAttributes(
        [SearchAttributePair(TENANT_ATTR, "t"), SearchAttributePair(AGENT_ATTR, agent)]
    )
    execution = WorkflowExecution(
        close_time=None,
        execution_time=None,
        history_length=0,
        id=f"wolf/t/{sid}",
        namespace="default",
        parent_id=None,
        parent_run_id=None,
        root_id=None,
        root_run_id=None,
        raw_info=None,  # type: ignore[arg-type]
        run_id="r",
        search_attributes={},
        start_time=started,
        status=WorkflowExecutionStatus.RUNNING,
        task_queue="q",
        typed_search_attributes=attrs,
        workflow_type="SessionWorkflow",
        _context_free_data_converter=None,  # type: ignore[arg-type]
    )
    usage = Usage(requests=1, input_tokens=tokens, output_tokens=1, cost_usd=usd)
    return Spending(execution, Counters(usage=usage))


def test_bars_sum_to_the_totals_and_small_groups_join_others():
    week = usage_chart.RANGES[1]
    since = week.start(NOW)
    assert since == datetime(2026, 11, 26, tzinfo=UTC)  # seven whole days, today's included
    sessions = [
        spent(f"s{i}", f"agent{i}", since + timedelta(days=i % 7, hours=5), 100 * (i + 1), 0.01)
        for i in range(8)
    ]
    sessions.append(Spending(sessions[0].execution, None))  # could not say: counted nowhere
    chart = usage_chart.chart(sessions, "agent", week, since)
    report = usage_report(sessions, since=since, by="agent")
    assert sum(s.usage.total_tokens for s in chart.segments) == report.total.total_tokens
    assert sum(s.usage.requests for s in chart.segments) == report.total.requests == 8
    assert chart.measure == "USD" and len(chart.ticks) == 7
    assert [g for g, _ in chart.legend] == [
        "agent7",
        "agent6",
        "agent5",
        "agent4",
        "agent3",
        "agent2",
        "others",
    ]
    others = [s for s in chart.segments if s.group == "others"]
    assert {s.when for s in others} == {"2026-11-26", "2026-11-27"}  # agent0 on day 0, agent1 on day 1
    assert all(s.y >= 0 and s.y + s.height <= chart.plot + 0.01 for s in chart.segments)

    day = usage_chart.RANGES[0]
    hourly = usage_chart.chart(sessions[:1], "session", day, day.start(NOW))
    assert day.start(NOW) == datetime(2026, 12, 1, 11, tzinfo=UTC) and hourly.measure == "USD"
    assert usage_chart.chart([], "agent", day, day.start(NOW)).segments == []


async def test_sessions_near_or_over_their_session_budget_are_marked():
    manifest = make_manifest({"limits": {"usd_budget_session": 1.0}})
    served = Served(client=cast(Client, None), task_queue="q", keys=ApiKeys([]), manifest=manifest)
    sessions = [spent(sid, "a", NOW, 10, usd) for sid, usd in (("low", 0.5), ("near", 0.85), ("over", 1.2))]
    sessions.append(spent("other", "b", NOW, 10, 5.0))  # agent b has no budget: not listed
    rows, flagged = await budgets.budgets(served, Principal("t"), sessions)
    assert [(r.agent, r.config, r.session_usd, r.turn_usd, r.sessions, round(r.spent, 2)) for r in rows] == [
        ("a", "file", 1.0, None, 3, 2.55)
    ]
    assert [(f.session_id, f.over) for f in flagged] == [("over", True), ("near", False)]
