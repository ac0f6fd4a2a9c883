"""`wolf.memory`: a memory tool call against the store the config names (agentwolf/memory/). The
tenant is the calling workflow's; the owner is the one the workflow recorded at its start. Safe to
run twice: a write's receipt (by the call's key) answers a retry, and reads change nothing. A store
that cannot be opened answers the model an error at once; a failing one after its retries
(workflows/session/memory.py): never the turn."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable
from typing import Any

from pydantic_ai.messages import ModelRequest, TextPart, UserPromptPart
from pydantic_ai.models import ModelRequestParameters
from pydantic_ai.settings import ModelSettings
from temporalio import activity

from agentwolf.access import check_caller
from agentwolf.activities import capabilities, live
from agentwolf.activities.session import SessionActivities
from agentwolf.activities.session_io import heartbeating
from agentwolf.config.placeholders import MissingVariable
from agentwolf.config.policy import SecretRefused
from agentwolf.config.quotas import PRIORITIES
from agentwolf.hosts import quotas
from agentwolf.memory import extraction
from agentwolf.memory.faces import Faces, digest
from agentwolf.memory.namespaces import Namespace, NamespaceError
from agentwolf.memory.store import PENDING, MemoryStore, MemoryStoreError, NewRow, Plan, Reader
from agentwolf.workflows.memory_tools import KINDS, MemoryCall, MemoryExtract, MemoryOutput, MemoryView

BACKGROUND = next(p for p, name in PRIORITIES.items() if name == "background")


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

    @activity.defn(name="wolf.memory_extract")
    async def memory_extract(self, inp: MemoryExtract) -> list[str]:
        """One extraction pass (agentwolf/memory/extraction.py): the agent's model, at background
        priority, proposes facts; those kept are written under the pass's key, so a retried pass
        writes once. Returns the ids written."""
        check_caller(inp.ref.workflow_id, inp.ref.tenant, self.sessions.hosts.tenant)
        host = await self.sessions.host(inp.ref)
        secrets = self.sessions.hosts.policy.secrets_for(inp.ref.tenant)
        url = secrets.resolve(inp.store) if inp.store else None
        store = await asyncio.to_thread(self.sessions.hosts.memory.get, url)
        model = quotas.bind(await heartbeating(host.model(inp.models)), quotas.Waits(priority=BACKGROUND))
        request = ModelRequest(
            parts=[UserPromptPart(extraction.source(inp.messages))], instructions=extraction.INSTRUCTIONS
        )
        response = await heartbeating(
            live.request(model, [request], ModelSettings(), ModelRequestParameters(), None)
        )
        answer = "".join(p.content for p in response.parts if isinstance(p, TextPart))
        return await asyncio.to_thread(_keep, store, inp, extraction.candidates(answer))


def _keep(store: MemoryStore, inp: MemoryExtract, found: list[dict[str, object]]) -> list[str]:
    ns = Namespace(inp.ref.tenant, inp.owner, inp.agent)
    echoed = extraction.template_lines(inp.templates, inp.messages)
    fresh = [c for c in found if not extraction.echoes(str(c["text"]), echoed)]
    kind = PENDING if inp.settings.extract == "review" else None

    def plan(reader: Reader) -> Plan:
        seen = {
            extraction.normal(r.body) for r in reader.current(MemoryView(), [ns], kinds=[*KINDS, PENDING])
        }
        rows = []
        for c in fresh:
            text = str(c["text"]).strip()
            if extraction.normal(text) in seen:
                continue
            seen.add(extraction.normal(text))
            about = c.get("about") if isinstance(c.get("about"), str) else ""
            rows.append(NewRow(kind or extraction.kind_of(c), text, str(about)))
        return Plan(rows, f"extracted {len(rows)}")

    evidence = sorted({d for c in fresh for d in extraction.evidence(c, inp.messages)})
    provenance = inp.provenance.model_copy(update={"source": "extracted", "call": " ".join(evidence)})
    receipt = store.write(ns, MemoryView(), inp.key, digest("extract", {"key": inp.key}), provenance, plan)
    return receipt.ids
