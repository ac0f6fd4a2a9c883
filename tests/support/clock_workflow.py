"""A workflow that reads the wall clock: the sandbox must fail its workflow task (tests/test_sandbox.py)."""

from __future__ import annotations

from datetime import datetime

from temporalio import workflow


@workflow.defn
class ClockWorkflow:
    @workflow.run
    async def run(self) -> str:
        return datetime.now().isoformat()
