"""`wolf.memory`: a memory tool call against the store the config names (agentwolf/memory/). The
tenant is the calling workflow's; the owner is the one the workflow recorded at its start. Safe to
run twice: a write's receipt (by the call's key) answers a retry, and reads change nothing. A store
that cannot be opened answers the model an error at once; a failing one after its retries
(workflows/session/memory.py): never the turn."""

from __future__ import annotations

import asyncio

from temporalio import activity

from agentwolf.access import check_caller
from agentwolf.activities.session_io import heartbeating
from agentwolf.config.placeholders import MissingVariable
from agentwolf.config.policy import SecretRefused
from agentwolf.hosts.host_registry import HostRegistry
from agentwolf.memory.faces import Faces
from agentwolf.memory.namespaces import NamespaceError
from agentwolf.memory.store import MemoryStoreError
from agentwolf.workflows.memory_tools import MemoryCall, MemoryOutput


class MemoryActivities:
    def __init__(self, hosts: HostRegistry) -> None:
        self.hosts = hosts

    @activity.defn(name="wolf.memory")
    async def memory(self, inp: MemoryCall) -> MemoryOutput:
        check_caller(inp.ref.workflow_id, inp.ref.tenant, self.hosts.tenant)
        secrets = self.hosts.policy.secrets_for(inp.ref.tenant)
        try:
            url = secrets.resolve(inp.store) if inp.store else None
            store = await asyncio.to_thread(self.hosts.memory.get, url)
            faces = Faces(store, inp.ref.tenant, inp)
        except (MemoryStoreError, MissingVariable, SecretRefused, NamespaceError) as exc:
            return MemoryOutput(content=secrets.redact(f"memory is unavailable: {exc}"), is_error=True)
        # A driver's error is retried (workflows/session/memory.py); after the last attempt the model is told.
        return await heartbeating(asyncio.to_thread(faces.run))
