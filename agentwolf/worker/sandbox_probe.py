"""The smallest workflow: the sandbox's start-up self-test runs one activation of it (worker/sandbox.py)."""

from __future__ import annotations

from temporalio import workflow


@workflow.defn(name="wolf.sandbox_probe")
class SandboxProbe:
    @workflow.run
    async def run(self, text: str) -> str:
        return text
