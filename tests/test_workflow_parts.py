"""The session workflow's parts that need no server: the limit guard (pure) and the approvals'
book-keeping. The parts that run activities are tested through the workflow (test_session*,
test_approval*, ...) and the replay corpus (test_replay.py)."""

from __future__ import annotations

from datetime import UTC, datetime

from pydantic_ai.messages import ToolCallPart

from agentwolf.config.manifest import Limits
from agentwolf.workflows.session.approvals import Approvals
from agentwolf.workflows.session.turn import Turn
from agentwolf.workflows.session.turn_limits import LimitGuard
from agentwolf.workflows.session_input import TurnSnapshot
from agentwolf.workflows.types import Approval, PendingApproval, Prompt, Usage


def _turn(tokens: int = 0, usd: float | None = None, calls: list[ToolCallPart] | None = None) -> Turn:
    return Turn(pending=[], open_calls=calls or [], usage=Usage(input_tokens=tokens, cost_usd=usd))


def test_the_guard_stops_a_turn_at_its_steps_and_budgets_and_warns_once_before():
    guard = LimitGuard(Limits(max_steps=3, usd_budget_turn=1.0, usd_budget_session=5.0, token_budget=100))
    assert guard.before_step(2, 0.5, 4.0) is None
    assert guard.before_step(3, 0.0, 0.0) == "max_steps (3) reached"
    assert guard.before_step(0, 1.0, 0.0) == "USD budget of the turn ($1) reached: $1.000000"
    assert guard.before_step(0, 0.0, 5.5) == "USD budget of the session ($5) reached: $5.500000"
    # 80 % of a USD budget: said once, as spending passes it (turn first, then session).
    assert guard.usd_warnings((0.7, 3.9), (0.85, 4.1)) == [
        "80% of the turn's USD budget used ($0.850000 of $1)",
        "80% of the session's USD budget used ($4.100000 of $5)",
    ]
    assert guard.usd_warnings((0.85, 4.1), (0.9, 4.2)) == []
    assert LimitGuard(Limits()).usd_warnings((0, 0), (100.0, 100.0)) == []  # no budgets, no warnings
    # Tokens: a warning at 80 %, once per turn; the stop at the budget.
    turn = _turn(tokens=85)
    assert guard.calls_asked(turn, 0.0).warnings == ["80% of the token budget used (85)"]
    assert turn.warned_budget and guard.calls_asked(turn, 0.0).warnings == []
    assert guard.calls_asked(_turn(tokens=100), 0.0).stop == "token budget (100) reached"
    assert guard.calls_asked(_turn(usd=1.2), 0.0).stop == "USD budget of the turn ($1) reached: $1.200000"


def test_the_loop_guard_counts_calls_by_tool_and_arguments_across_steps():
    guard = LimitGuard(Limits(loop_warn=2, loop_stop=3))
    turn = _turn()
    same = ToolCallPart("add", {"a": 1, "b": 2}, "c1")
    reordered = ToolCallPart("add", '{"b": 2, "a": 1}', "c2")  # the same arguments, another order
    other = ToolCallPart("add", {"a": 2, "b": 2}, "c3")
    turn.open_calls = [same, other]
    assert guard.calls_asked(turn, 0.0).stop is None and turn.warnings == []
    turn.open_calls = [reordered]
    check = guard.calls_asked(turn, 0.0)
    assert check.stop is None and turn.warnings == ["add"]
    assert guard.repeat_note("add") == (
        "You have called add 2 times with the same arguments. Change approach; the turn stops at 3 repeats."
    )
    turn.open_calls = [other, same]
    check = guard.calls_asked(turn, 0.0)
    assert check.stop == "loop guard: add called 3 times with the same arguments"


def test_approvals_take_answers_only_for_calls_that_wait_and_carry_over_a_snapshot():
    at = datetime(2026, 12, 1, tzinfo=UTC)
    approvals = Approvals()
    assert not approvals.decide(Approval(call_id="nobody"), approved=True)  # no such call: ignored
    assert approvals.ask("c1", "add", {"a": 1}, at)
    assert not approvals.ask("c1", "add", {"a": 1}, at)  # asked already (before a continue-as-new)
    assert not approvals.unanswered()
    assert approvals.decide(Approval(call_id="c1", always=True), approved=True)
    assert approvals.unanswered()
    snapshot = TurnSnapshot(
        prompt=Prompt(turn_id="turn-1", text="hi"),
        step=1,
        usage=Usage(),
        open_calls=[],
        finished={},
        pending_approvals=list(approvals.pending.values()),
        decisions=dict(approvals.decisions),
    )
    carried = Approvals(TurnSnapshot.model_validate_json(snapshot.model_dump_json()), ["mcp:add"])
    assert carried.pending == {"c1": PendingApproval(call_id="c1", tool="add", args={"a": 1}, asked_at=at)}
    assert carried.decisions["c1"][0] is True and carried.always_allowed == {"mcp:add"}
    carried.end("c1")
    assert carried.pending == {} and not carried.unanswered()
    carried.clear()
    assert carried.decisions == {} and carried.always_allowed == {"mcp:add"}  # the session's, kept
