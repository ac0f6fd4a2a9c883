"""`wolf.code_start` and `wolf.code_resume`: a code-mode script runs in the worker's sandboxes until
it waits on tool calls or ends (extensions/code_mode.py), on the sandboxes' own threads. Safe to run
twice: a run starts from the script or a snapshot and calls nothing outside the sandbox."""

from __future__ import annotations

from temporalio import activity

from agentwolf.activities.session_io import heartbeating
from agentwolf.extensions import code_mode
from agentwolf.hosts.host_registry import HostRegistry
from agentwolf.workflows.script import ScriptResume, ScriptStart, ScriptStep


class CodeActivities:
    def __init__(self, hosts: HostRegistry) -> None:
        self.sandboxes = hosts.sandboxes

    @activity.defn(name="wolf.code_start")
    async def code_start(self, inp: ScriptStart) -> ScriptStep:
        return await heartbeating(self.sandboxes.run(code_mode.start, inp))

    @activity.defn(name="wolf.code_resume")
    async def code_resume(self, inp: ScriptResume) -> ScriptStep:
        return await heartbeating(self.sandboxes.run(code_mode.resume, inp))
