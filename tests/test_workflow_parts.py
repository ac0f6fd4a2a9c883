"""The session workflow's parts that need no server: the limit guard (pure), the approvals'
book-keeping, the transcript log and a turn's end. The parts that run activities are tested through
the workflow (test_session*, test_approval*, ...) and the replay corpus (test_replay.py)."""

from __future__ import annotations

import ast
import re
from datetime import UTC, datetime
from pathlib import Path

from pydantic_ai.messages import (
    ModelMessage,
    ModelRequest,
    ModelResponse,
    TextPart,
    ToolCallPart,
    ToolReturnPart,
    UserPromptPart,
)

from agentwolf.config.manifest import Limits, Manifest
from agentwolf.workflows.archive import ARCHIVED, ArchivedPart, StoredRef
from agentwolf.workflows.compaction import ContextView
from agentwolf.workflows.contracts import EMPTY_DIGEST, chain_digest
from agentwolf.workflows.session import core
from agentwolf.workflows.session.approvals import Approvals
from agentwolf.workflows.session.transcript_log import TranscriptLog
from agentwolf.workflows.session.turn import Turn, turn_end
from agentwolf.workflows.session.turn_limits import LimitGuard
from agentwolf.workflows.session_input import SessionInput, TurnSnapshot
from agentwolf.workflows.types import Approval, Counters, PendingApproval, Prompt, Usage

AT = datetime(2026, 1, 1, tzinfo=UTC)


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


def _log(messages: list[ModelMessage] | None = None) -> TranscriptLog:
    inp = SessionInput(session_id="s", agent="a", manifest=Manifest(), transcript=messages or [])
    return TranscriptLog(inp)


def _exchange(n: int) -> list[ModelMessage]:
    return [
        ModelRequest(parts=[UserPromptPart(f"q{n}", timestamp=AT)]),
        ModelResponse(parts=[TextPart(f"a{n}")], timestamp=AT),
    ]


def test_the_transcript_log_keeps_its_chain_and_what_the_worker_holds_through_each_change():
    """Appends, a sent request, turn marks, archiving, a summary, a rewind and the hand-over: the
    digest always chains the whole line, and the sync marks say what the worker holds."""
    log = _log(_exchange(0))
    assert log.synced_len == 2 and log.synced_digest == log.digest == chain_digest(EMPTY_DIGEST, _exchange(0))
    for n in (1, 2):
        log.turn_started(f"turn-{n}", config_version=None)
        request, response = _exchange(n)
        log.append(request)
        log.mark_sent(response)  # the worker appended the answer to its copy
        log.append(response)
        log.turn_ended(f"turn-{n}", Counters(turns=n))
        assert (log.synced_len, log.synced_digest) == (len(log.transcript), log.digest)
    whole = log.digest
    assert whole == log.whole_digest() and log.appended_bytes > 0
    assert [(m.turn_id, m.start, m.end) for m in log.turns] == [("turn-1", 2, 4), ("turn-2", 4, 6)]

    part = ArchivedPart(start=0, end=2, ref=StoredRef(metadata={}, data="{}"))
    log.archived(part, end=2, fold="q0 -> a0")
    assert log.transcript[:2] == [ARCHIVED, ARCHIVED] and log.tail() == log.transcript[2:]
    assert log.archive.length == 2 and log.archive.digest == chain_digest(EMPTY_DIGEST, _exchange(0))
    assert log.whole_digest() == whole  # the chain goes on over the archived part
    log.summarised(upto=1)
    assert log.archive.fold == "q0 -> a0"  # the summary does not cover every archived message yet
    log.summarised(upto=2)
    assert log.archive.fold == ""

    done, _ = log.rewound("1", ContextView(), None, whole_view=True)
    assert done.point == "turn-1" and [b.name for b in log.branches] == ["branch-1"]
    assert len(log.transcript) == 4 and [m.turn_id for m in log.turns] == ["turn-1"]
    assert log.digest == log.synced_digest == log.whole_digest() and log.synced_len == 4
    log.released()
    assert log.transcript == [] and log.turns == []


def test_a_turn_end_closes_every_dangling_call_and_keeps_what_the_model_was_not_sent():
    calls = [ToolCallPart("read", {}, tool_call_id="c1"), ToolCallPart("write", {}, tool_call_id="c2")]
    ran = ToolReturnPart("write", "done", tool_call_id="c2", timestamp=AT)
    unsent = UserPromptPart("a tool's repeat note", timestamp=AT)
    turn = Turn(pending=[unsent], finished={1: ran}, open_calls=calls, usage=Usage(requests=2))

    end = turn_end(turn, "turn-3", "interrupted", None, AT)
    closed = end.closing[0]
    assert isinstance(closed, ToolReturnPart) and closed.tool_call_id == "c1"
    assert (closed.content, closed.outcome, closed.timestamp) == (
        "interrupted by the user",
        "interrupted",
        AT,
    )
    assert end.closing[1:] == [ran, unsent] and turn.finished == {1: ran}  # the turn is left as it was
    assert (end.turn_id, end.outcome, end.usage) == ("turn-3", "interrupted", Usage(requests=2))

    limited = turn_end(turn, "turn-3", "limit", "max_steps (3) reached", AT).closing[0]
    assert isinstance(limited, ToolReturnPart) and limited.content == "not run: max_steps (3) reached"
    done = turn_end(Turn(pending=[]), "turn-4", "completed", "the answer", AT)
    assert done.closing == [] and done.output == "the answer"


def test_the_session_core_has_at_most_15_fields_each_written_in_its_own_module():
    """The parts read the core and call its methods: no assignment to a core field elsewhere."""
    session = Path(core.__file__).parent
    assigned = re.compile(r"core\.[a-z_]+ (=|\+=|-=) ")
    found = [
        f"{path.name}:{n}: {line.strip()}"
        for path in sorted(session.glob("*.py"))
        if path.name != "core.py"
        for n, line in enumerate(path.read_text().splitlines(), 1)
        if assigned.search(line)
    ]
    assert found == []
    tree = ast.parse(Path(core.__file__).read_text())
    cls = next(n for n in tree.body if isinstance(n, ast.ClassDef) and n.name == "SessionCore")
    fields = {
        n.attr
        for n in ast.walk(cls)
        if isinstance(n, ast.Attribute) and isinstance(n.value, ast.Name) and n.value.id == "self"
        if isinstance(n.ctx, ast.Store)
    }
    assert len(fields) <= 15, sorted(fields)
