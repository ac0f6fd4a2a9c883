"""Hosts: the live infrastructure for one (config identity, tenant) on this worker."""

from __future__ import annotations

import asyncio
import logging
from collections import OrderedDict
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field

from pydantic_ai.messages import ModelMessage
from pydantic_ai.models import Model

from agentwolf.activities.types import CompiledAgent
from agentwolf.config.manifest import Manifest
from agentwolf.worker.models import build_model
from agentwolf.worker.pool import McpPool

log = logging.getLogger(__name__)


@dataclass
class CachedTranscript:
    messages: list[ModelMessage]
    digest: str


@dataclass
class AgentHost:
    """MCP pool, models and per-session caches for one (config, tenant)."""

    manifest: Manifest
    tenant: str
    local_models: Mapping[str, Model]
    pool: McpPool
    max_transcripts: int = 256
    compiled: dict[str, CompiledAgent] = field(default_factory=dict)
    transcript_misses: int = 0
    """Model requests whose transcript prefix had to be fetched from the workflow."""
    _models: dict[tuple[str, ...], Model] = field(default_factory=dict)
    _transcripts: OrderedDict[str, CachedTranscript] = field(default_factory=OrderedDict)

    def model(self, specs: list[str]) -> Model:
        key = tuple(specs)
        if key not in self._models:
            self._models[key] = build_model(specs, self.manifest.host.models.providers, self.local_models)
        return self._models[key]

    def transcript(self, workflow_id: str, base_len: int, base_digest: str) -> list[ModelMessage] | None:
        """This worker's copy of a session's first `base_len` messages, if it provably matches."""
        cached = self._transcripts.get(workflow_id)
        if cached is None or len(cached.messages) != base_len or cached.digest != base_digest:
            self.transcript_misses += 1
            return None
        self._transcripts.move_to_end(workflow_id)
        return cached.messages

    def remember(self, workflow_id: str, messages: list[ModelMessage], digest: str) -> None:
        self._transcripts[workflow_id] = CachedTranscript(messages, digest)
        self._transcripts.move_to_end(workflow_id)
        while len(self._transcripts) > self.max_transcripts:
            self._transcripts.popitem(last=False)

    async def close(self) -> None:
        await self.pool.close()


class HostRegistry:
    """One `AgentHost` per (config identity, tenant), created on first use."""

    def __init__(
        self,
        local_models: Mapping[str, Model] | None = None,
        *,
        max_mcp_clients: int = 20,
        mcp_idle_timeout: float = 600.0,
    ) -> None:
        self.local_models = dict(local_models or {})
        self.max_mcp_clients = max_mcp_clients
        self.mcp_idle_timeout = mcp_idle_timeout
        self._hosts: dict[tuple[str, str], AgentHost] = {}

    def find(self, config_id: str, tenant: str) -> AgentHost | None:
        return self._hosts.get((config_id, tenant))

    async def get(
        self, config_id: str, tenant: str, fetch_manifest: Callable[[], Awaitable[Manifest]]
    ) -> AgentHost:
        host = self.find(config_id, tenant)
        if host is not None:
            return host
        manifest = await fetch_manifest()
        return self.ensure(manifest, tenant)

    def ensure(self, manifest: Manifest, tenant: str) -> AgentHost:
        """The host for this config and tenant; configs whose `host:` sections match share one."""
        key = (manifest.identity, tenant)
        host = self._hosts.get(key) or next(
            (h for h in self._hosts.values() if h.tenant == tenant and h.manifest.host_identity == manifest.host_identity),
            None,
        )
        if host is not None:
            self._hosts[key] = host
        else:
            pool = McpPool(
                manifest.host.mcp_servers, max_clients=self.max_mcp_clients, idle_timeout=self.mcp_idle_timeout
            )
            host = AgentHost(manifest, tenant, self.local_models, pool)
            self._hosts[key] = host
            log.info("host created: config %s, tenant %s", manifest.identity, tenant)
        return host

    def hosts(self) -> list[AgentHost]:
        return list({id(h): h for h in self._hosts.values()}.values())

    async def close(self) -> None:
        hosts, self._hosts = self.hosts(), {}
        await asyncio.gather(*(h.close() for h in hosts))
