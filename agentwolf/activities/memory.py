"""`wolf.memory`: a memory tool call against the store the config names (agentwolf/memory/). The
tenant is the calling workflow's; the owner is the one the workflow recorded at its start. Safe to
run twice: a write's receipt (by the call's key) answers a retry, and reads change nothing. A store
that cannot be opened answers the model an error at once; a failing one after its retries
(workflows/session/memory.py): never the turn."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable
from typing import Any

from temporalio import activity

from agentwolf.access import check_caller
from agentwolf.activities import capabilities
from agentwolf.activities.session import SessionActivities
from agentwolf.activities.session_io import heartbeating
from agentwolf.config.placeholders import MissingVariable
from agentwolf.config.policy import SecretRefused
from agentwolf.memory.faces import Faces
from agentwolf.memory.namespaces import NamespaceError
from agentwolf.memory.store import MemoryStoreError
from agentwolf.workflows.memory_tools import MemoryCall, MemoryOutput


class MemoryActivities:
    def __init__(self, sessions: SessionActivities) -> None:
        self.sessions = sessions

    @activity.defn(name="wolf.memory")
    async def memory(self, inp: MemoryCall) -> MemoryOutput:
        hosts = self.sessions.hosts
        check_caller(inp.ref.workflow_id, inp.ref.tenant, hosts.tenant)
        secrets = hosts.policy.secrets_for(inp.ref.tenant)
        try:
            url = secrets.resolve(inp.store) if inp.store else None
            store = await asyncio.to_thread(hosts.memory.get, url)
            Faces(store, inp.ref.tenant, inp)  # a bad namespace is said before any hook runs
        except (MemoryStoreError, MissingVariable, SecretRefused, NamespaceError) as exc:
            return MemoryOutput(content=secrets.redact(f"memory is unavailable: {exc}"), is_error=True)

        def run(args: dict[str, Any]) -> Awaitable[MemoryOutput]:
            faces = Faces(store, inp.ref.tenant, inp.model_copy(update={"arguments": args}))
            return asyncio.to_thread(faces.run)

        # A driver's error is retried (workflows/session/memory.py); after the last attempt the model
        # is told. The agent's tool hooks run around the call (activities/capabilities.py).
        host = await self.sessions.host(inp.ref)
        manifest = hosts.manifests[inp.ref.config_id]
        return await heartbeating(
            capabilities.call_builtin(
                host, manifest, inp.as_tool_call(), run, lambda: MemoryOutput(content="")
            )
        )
