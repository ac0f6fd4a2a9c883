"""The turn's limit guard: step count, USD and token budgets, the loop guard. Pure: it reads a
turn's counts and the agent's limits and says what to warn about or why the turn stops; the turn
runner publishes and raises. Tested without a server (tests/test_workflow_parts.py).

Imported passed through, like turn.py: no `workflow.*` at all.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field

from agentwolf.config.manifest import Limits
from agentwolf.workflows.session.turn import Turn

WARN_SHARE = 0.8
"""A budget's share past which one warning is said."""


@dataclass
class LimitCheck:
    """What a check found: warnings to say (in order), then a reason to stop the turn, if any."""

    warnings: list[str] = field(default_factory=list)
    stop: str | None = None


@dataclass
class LimitGuard:
    """The agent's limits over one turn."""

    limits: Limits

    def before_step(self, step: int, turn_spent: float, session_spent: float) -> str | None:
        """Why no further model request may go out: steps used up, or a USD budget spent (subagents
        and earlier turns included)."""
        if step >= self.limits.max_steps:
            return f"max_steps ({self.limits.max_steps}) reached"
        return self.usd_stop(turn_spent, session_spent)

    def usd_stop(self, turn_spent: float, session_spent: float) -> str | None:
        for scope, budget, spent in (
            ("turn", self.limits.usd_budget_turn, turn_spent),
            ("session", self.limits.usd_budget_session, session_spent),
        ):
            if budget and spent >= budget:
                return f"USD budget of the {scope} (${budget:g}) reached: ${spent:.6f}"
        return None

    def usd_warnings(self, before: tuple[float, float], after: tuple[float, float]) -> list[str]:
        """Spending went from `before` to `after` (turn, session): a warning for each budget whose
        WARN_SHARE it just passed."""
        budgets = (self.limits.usd_budget_turn, self.limits.usd_budget_session)
        return [
            f"80% of the {scope}'s USD budget used (${now:.6f} of ${budget:g})"
            for scope, budget, was, now in zip(("turn", "session"), budgets, before, after, strict=True)
            if budget and was < WARN_SHARE * budget <= now
        ]

    def calls_asked(self, turn: Turn, session_spent: float) -> LimitCheck:
        """Once a step's calls are known (`turn.open_calls`): the budgets, then the loop guard, which
        counts each call by tool and arguments (`turn.repeats`) and notes the tools to warn about
        once the step's results are in (`turn.warnings`)."""
        check = LimitCheck(stop=self.usd_stop(turn.usage.spent, session_spent))
        if check.stop:
            return check
        budget = self.limits.token_budget
        if budget:
            if turn.usage.total_tokens >= budget:
                return LimitCheck(stop=f"token budget ({budget}) reached")
            if not turn.warned_budget and turn.usage.total_tokens >= WARN_SHARE * budget:
                turn.warned_budget = True
                check.warnings.append(f"80% of the token budget used ({turn.usage.total_tokens})")
        for call in turn.open_calls:
            key = f"{call.tool_name}:{json.dumps(call.args_as_dict(), sort_keys=True, default=str)}"
            turn.repeats[key] += 1
            if turn.repeats[key] >= self.limits.loop_stop:
                check.stop = (
                    f"loop guard: {call.tool_name} called {turn.repeats[key]} times with the same arguments"
                )
                return check
            if turn.repeats[key] == self.limits.loop_warn:
                turn.warnings.append(call.tool_name)
        return check

    def repeat_note(self, tool: str) -> str:
        """What the model is told about a tool the loop guard warns about."""
        return (
            f"You have called {tool} {self.limits.loop_warn} times with the same arguments. "
            f"Change approach; the turn stops at {self.limits.loop_stop} repeats."
        )
