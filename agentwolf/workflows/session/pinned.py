"""The session as a versioned worker runs it: SessionWorkflow declared PINNED.

A module of its own: a worker that does not version cannot run a workflow that declares a behaviour
(its workflow tasks are refused), and the sandbox executes a workflow's module again for every run,
so unversioned workers do not pay for this second definition."""

from __future__ import annotations

from temporalio import workflow
from temporalio.common import VersioningBehavior

with workflow.unsafe.imports_passed_through():
    from agentwolf.workflows.session_input import SessionInput
    from agentwolf.workflows.types import SESSION_WORKFLOW, SessionResult

from agentwolf.workflows.session.workflow import SessionWorkflow  # workflow code: sandboxed like this module


@workflow.defn(name=SESSION_WORKFLOW, versioning_behavior=VersioningBehavior.PINNED)
class PinnedSessionWorkflow(SessionWorkflow):
    """Pinned, so a running session never replays on another build's code; it
    moves to the current build at its next idle continue-as-new (TurnRunner.moving in loop.py)."""

    @workflow.init
    def __init__(self, inp: SessionInput) -> None:
        super().__init__(inp)

    @workflow.run
    async def run(self, inp: SessionInput) -> SessionResult:
        return await super().run(inp)
