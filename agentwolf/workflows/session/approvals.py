"""The session's approvals: tool calls waiting for a person, answers not yet taken, and the tools a
person allowed for the rest of the session. The wait itself is `wait`; who asks (a tool call under
the agent's rules, an ACP agent's permission request) says so in events around it.

Imported passed through, like turn.py: deterministic, `workflow.*` only (import-linter contract).
"""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import Any

from temporalio import workflow

from agentwolf.workflows.session_input import TurnSnapshot
from agentwolf.workflows.types import Approval, PendingApproval


class Approvals:
    """What waits for a person's answer. Carried over continue-as-new: waits and answers with a turn
    that waits (`TurnSnapshot`), the tools always allowed with the session."""

    def __init__(self, resume: TurnSnapshot | None = None, always_allowed: list[str] | None = None) -> None:
        self.pending: dict[str, PendingApproval] = (
            {p.call_id: p for p in resume.pending_approvals} if resume else {}
        )
        """Calls waiting for an answer, by call id (`call_keys`)."""
        self.decisions: dict[str, tuple[bool, Approval]] = dict(resume.decisions) if resume else {}
        """Answers that came and are not yet taken by their waiting call: (approved, answer)."""
        self.always_allowed: set[str] = set(always_allowed or ())
        """Tools (`server:tool`) a person allowed for the rest of the session."""
        self.answered_at: dict[str, datetime] = {}
        """When each call that waited was answered: its duration counts from there."""

    def decide(self, answer: Approval, approved: bool) -> bool:
        """Record a person's answer for the waiting call it names; False when no such call waits."""
        if answer.call_id not in self.pending:
            return False
        self.decisions[answer.call_id] = (approved, answer)
        return True

    def ask(self, call_id: str, tool: str, args: dict[str, Any], at: datetime) -> bool:
        """The call waits from `at`; False when it waited already (asked before a continue-as-new)."""
        if call_id in self.pending:
            return False
        self.pending[call_id] = PendingApproval(call_id=call_id, tool=tool, args=args, asked_at=at)
        return True

    async def wait(self, call_id: str, timeout: timedelta | None = None) -> tuple[bool, Approval]:
        """The answer to `call_id`, taken; TimeoutError when none came within `timeout`."""
        await workflow.wait_condition(lambda: call_id in self.decisions, timeout=timeout)
        return self.decisions.pop(call_id)

    def end(self, call_id: str) -> None:
        """The call no longer waits (answered, timed out or cancelled)."""
        del self.pending[call_id]

    def clear(self) -> None:
        """A turn ended: its waits and answers go (an answer kept would be taken by a later call that
        has the same id)."""
        self.pending.clear()
        self.decisions.clear()

    def unanswered(self) -> bool:
        """An answer waits to be taken by its call (the turn takes it in this activation)."""
        return bool(self.decisions.keys() & self.pending.keys())
