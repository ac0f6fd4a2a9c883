"""The worker's hosts: one `AgentHost` (host.py) per (config identity, tenant), created on first
use, shared by configs whose `host:` sections match, kept while an activity uses it and closed when
idle. Built whole by the worker's bootstrap (its quota client and change signal given at
construction); the code mode sandboxes and the transcript cache are the worker's, shared by its hosts.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections import Counter
from collections.abc import Awaitable, Callable, Iterator, Mapping
from contextlib import contextmanager

from agentwolf.config.manifest import Manifest
from agentwolf.config.policy import WorkerPolicy
from agentwolf.extensions.code_mode import Sandboxes
from agentwolf.extensions.pool import McpPool
from agentwolf.hosts.demo import demo_model, slow_model
from agentwolf.hosts.host import AgentHost, Notify
from agentwolf.hosts.quotas import Quotas
from agentwolf.hosts.transcripts import TranscriptCache
from agentwolf.memory.stores import Stores
from agentwolf.plugins import LocalModel, Plugins

log = logging.getLogger(__name__)

MAX_CONFIGS_PER_HOST = 16


class HostRegistry:
    """One `AgentHost` per (config identity, tenant), created on first use, closed when idle."""

    def __init__(
        self,
        local_models: Mapping[str, LocalModel] | None = None,
        *,
        policy: WorkerPolicy | None = None,
        tenant: str | None = None,
        plugins: Plugins | None = None,
        max_mcp_clients: int = 20,
        mcp_idle_timeout: float = 600.0,
        host_idle_timeout: float = 1800.0,
        notify: Notify | None = None,
        quotas: Quotas | None = None,
    ) -> None:
        """`notify` signals a session that extensions it uses changed, `quotas` reaches the fleet's
        provider quota workflows (None: neither, as for a registry without a Temporal client)."""
        self.plugins = plugins or Plugins()
        self.local_models = {
            "demo": demo_model(),
            "slow": slow_model(),
            **self.plugins.models,
            **(local_models or {}),
        }
        """`local:<name>` models: the demos (on every worker), the plugins' and the embedder's."""
        self.policy = policy or WorkerPolicy()
        self.tenant = tenant
        """The only tenant this worker serves (`wolf worker --tenant`); None serves any."""
        self.notify = notify
        self.quotas = quotas
        self.manifests: dict[str, Manifest] = {}
        """The configs of the open hosts, by identity (a host may serve several); each goes with its host."""
        self.max_mcp_clients = max_mcp_clients
        self.mcp_idle_timeout = mcp_idle_timeout
        self.host_idle_timeout = host_idle_timeout
        self.evicted = 0
        self.transcripts = TranscriptCache()
        """One transcript cache for every host: the worker's bound, not each host's."""
        self.sandboxes = Sandboxes()
        """Code mode's sandbox processes, for every host."""
        self.memory = Stores()
        """Long-term memory stores, by URL, for every host."""
        self._hosts: dict[tuple[str, str], AgentHost] = {}
        """By (config identity, tenant), least recently ensured first; configs whose `host:` sections
        match share a host, each under its own key (at most MAX_CONFIGS_PER_HOST of them)."""
        self._reaper: asyncio.Task[None] | None = None
        self._serving: Counter[tuple[str, str]] = Counter()

    @contextmanager
    def serving(self, config_id: str, tenant: str) -> Iterator[None]:
        """Mark an activity in progress for this host, so it is not closed under it."""
        key = (config_id, tenant)
        self._serving[key] += 1
        try:
            yield
        finally:
            self._serving[key] -= 1
            if not self._serving[key]:
                del self._serving[key]
            if host := self._hosts.get(key):
                host.last_used = time.monotonic()

    def find(self, config_id: str, tenant: str) -> AgentHost | None:
        return self._hosts.get((config_id, tenant))

    async def get(
        self, config_id: str, tenant: str, fetch_manifest: Callable[[], Awaitable[Manifest]]
    ) -> AgentHost:
        host = self.find(config_id, tenant)
        if host is not None:
            host.last_used = time.monotonic()
            return host
        manifest = self.manifests.get(config_id) or await fetch_manifest()
        return self.ensure(manifest, tenant)

    def ensure(self, manifest: Manifest, tenant: str) -> AgentHost:
        """The host for this config and tenant; configs whose `host:` sections match share one."""
        key = (manifest.identity, tenant)
        self.manifests.setdefault(manifest.identity, manifest)
        host = self._hosts.get(key) or next(
            (
                h
                for h in self._hosts.values()
                if h.tenant == tenant and h.manifest.host_identity == manifest.host_identity
            ),
            None,
        )
        if host is not None:
            self._hosts.pop(key, None)  # to the end: most recently used
            self._hosts[key] = host
            host.last_used = time.monotonic()
            self._trim_keys(host)
        else:
            secrets = self.policy.secrets_for(tenant)
            pool = McpPool(
                manifest.host.mcp_servers,
                secrets=secrets,
                max_clients=self.max_mcp_clients,
                idle_timeout=self.mcp_idle_timeout,
                allowed_commands=manifest.host.allowed_commands,
            )
            host = AgentHost(
                manifest,
                tenant,
                self.local_models,
                pool,
                secrets,
                notify=self.notify,
                quotas=self.quotas,
                plugin_tools=self.plugins.tools,
                plugin_capabilities=self.plugins.capabilities,
                transcripts=self.transcripts,
            )
            self._hosts[key] = host
            log.info("host created: config %s, tenant %s", manifest.identity, tenant)
            self._start_reaper()
        return host

    def _trim_keys(self, host: AgentHost) -> None:
        """A busy host is never reaped, and every config pushed with the same `host:` section adds a
        key (and its manifest): keep the most recent MAX_CONFIGS_PER_HOST that no activity is using.
        A config dropped here that comes back asks its session for the manifest again."""
        keys = [k for k, h in self._hosts.items() if h is host and not self._serving[k]]
        for key in keys[: max(0, len(keys) - MAX_CONFIGS_PER_HOST)]:
            del self._hosts[key]
        configs = {config_id for config_id, _ in self._hosts}
        self.manifests = {c: m for c, m in self.manifests.items() if c in configs}

    def _start_reaper(self) -> None:
        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:
            return  # used outside an event loop (a one-off lookup): nothing to reap
        if self._reaper is None:
            self._reaper = loop.create_task(self._reap_idle())

    async def _reap_idle(self) -> None:
        """Close hosts nobody used for `host_idle_timeout` (their MCP servers stop); they return on demand."""
        while True:
            await asyncio.sleep(max(self.host_idle_timeout / 4, 0.05))
            now = time.monotonic()
            for host in self.hosts():
                keys = [k for k, h in self._hosts.items() if h is host]
                busy = host.pool.busy() or any(self._serving[k] for k in keys)
                if now - host.last_used > self.host_idle_timeout and not busy:
                    self._hosts = {k: h for k, h in self._hosts.items() if h is not host}
                    configs = {config_id for config_id, _ in self._hosts}
                    self.manifests = {c: m for c, m in self.manifests.items() if c in configs}
                    self.evicted += 1
                    log.info("closing idle host: config %s, tenant %s", host.manifest.identity, host.tenant)
                    try:
                        await host.close()
                    except Exception:
                        log.exception("closing an idle host failed")

    def hosts(self) -> list[AgentHost]:
        return list({id(h): h for h in self._hosts.values()}.values())

    async def close(self) -> None:
        if self._reaper is not None:
            self._reaper.cancel()
            self._reaper = None
        hosts, self._hosts = self.hosts(), {}
        try:
            await asyncio.gather(*(h.close() for h in hosts))
        finally:
            await asyncio.to_thread(self.sandboxes.close)
            await asyncio.to_thread(self.memory.close)
            if self.quotas is not None:
                await self.quotas.close()
