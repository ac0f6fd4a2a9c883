"""Hosts: the live infrastructure for one (config identity, tenant) on this worker.

A host holds the MCP pool, the extension registry (skill folders, MCP servers as capabilities),
the watchers that notice when they change, and caches. When something an agent uses changes, the
host signals the sessions it has served that use it; they recompile before their next model request.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import logging
import os
import time
from collections import Counter, OrderedDict
from collections.abc import Awaitable, Callable, Coroutine, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from mcp.shared.exceptions import MCPError
from pydantic_ai.models import Model

from agentwolf.config.manifest import Manifest, McpCapability, SkillsCapability
from agentwolf.config.policy import Secrets, WorkerPolicy
from agentwolf.extensions.code_mode import Sandboxes
from agentwolf.extensions.functions import FunctionToolsCap
from agentwolf.extensions.mcp import McpServerCap
from agentwolf.extensions.pool import McpPool, McpUnavailable
from agentwolf.extensions.registry import POOL, ExtensionRegistry, Scope, ScopeLevel
from agentwolf.extensions.skills import LocalSkillRoot
from agentwolf.extensions.types import ChangeEvent, ExtensionError, SkillResource
from agentwolf.extensions.watch import SkillRootWatcher
from agentwolf.hosts.acp_agents import AcpRun
from agentwolf.hosts.demo import demo_model, slow_model
from agentwolf.hosts.models import build_model
from agentwolf.hosts.quotas import Quotas
from agentwolf.hosts.transcripts import CachedTranscript, TranscriptCache
from agentwolf.memory.stores import Stores
from agentwolf.plugins import FunctionTool, LocalModel, Plugins
from agentwolf.workflows.contracts import CompiledAgent
from agentwolf.workflows.types import ExtensionsChanged

Notify = Callable[[str, ExtensionsChanged], Awaitable[None]]
"""Signal one session (by workflow id) that extensions it uses changed."""

log = logging.getLogger(__name__)


@dataclass
class AgentHost:
    """MCP pool, models and per-session caches for one (config, tenant)."""

    manifest: Manifest
    tenant: str
    local_models: Mapping[str, LocalModel]
    pool: McpPool
    secrets: Secrets
    """Resolves this tenant's placeholders under the worker policy; redacts what it resolved."""
    notify: Notify | None = None
    quotas: Quotas | None = None
    """The fleet's provider quotas (None: none kept, as in tests without a Temporal client)."""
    plugin_tools: Mapping[str, Mapping[str, FunctionTool]] = field(default_factory=dict)
    """The worker's plugins' function tools (plugin -> tool name -> tool), for `{plugin: ...}` servers."""
    transcripts: TranscriptCache = field(default_factory=TranscriptCache)
    """The worker's transcript copies (HostRegistry gives every host the same one)."""
    max_compiled: int = 256
    max_sessions: int = 4096
    """Sessions remembered (for change notices and agent registrations), least recently served out
    first; one that comes back is re-checked and its agent registered again."""
    last_used: float = field(default_factory=time.monotonic)
    compiled: OrderedDict[str, CompiledAgent] = field(default_factory=OrderedDict)
    transcript_misses: int = 0
    """Model requests whose transcript prefix had to be fetched from the workflow."""
    registry: ExtensionRegistry = field(init=False)
    mcp: dict[str, McpServerCap] = field(default_factory=dict)
    functions: dict[str, FunctionToolsCap] = field(default_factory=dict)
    """Tool sources served by plugins, by server name (they take no MCP connection)."""
    skill_roots: dict[str, LocalSkillRoot] = field(default_factory=dict)
    sessions: dict[str, set[str]] = field(default_factory=dict)
    """Sessions this host served -> the sources their compiled agent depends on."""
    _served: OrderedDict[str, str] = field(default_factory=OrderedDict)
    """Sessions this host serves, least recently served first -> the agent (`name@identity`) they use."""
    _agent_users: Counter[str] = field(default_factory=Counter)
    _watchers: dict[str, SkillRootWatcher] = field(default_factory=dict)
    _agents: set[str] = field(default_factory=set)
    _registering: asyncio.Lock = field(default_factory=asyncio.Lock)
    _pump: asyncio.Task[None] | None = None
    _tasks: set[asyncio.Task[None]] = field(default_factory=set)
    _models: dict[tuple[str, ...], Model] = field(default_factory=dict)
    acp_runs: dict[str, AcpRun] = field(default_factory=dict)
    """The live ACP agent processes of the sessions this host serves, by workflow id."""

    def __post_init__(self) -> None:
        self.registry = ExtensionRegistry(
            max_composition_depth=self.manifest.host.skills.max_composition_depth, on_release=self._released
        )
        self.pool.on_list_changed = self._list_changed

    # -- extensions ----------------------------------------------------------------------------

    async def scope(self, manifest: Manifest, agent: str, session_id: str, turn_id: str) -> Scope:
        """The turn's scope, registering the host's and the agent's capabilities on first use.

        Registration is serialized and counts only once complete, so a concurrent caller never
        sees a half-registered agent, and a failure (a folder that cannot be watched) is retried.
        """
        key = f"{agent}@{manifest.agent_identity(agent)}"
        async with self._registering:
            if self._pump is None:
                for path in self.manifest.host.skills.paths:
                    self.registry.add(await self.skill_root(path), POOL)
                self._pump = asyncio.create_task(self._pump_changes())
            if key not in self._agents:
                where = Scope(ScopeLevel.AGENT, key)
                config = manifest.agents.get(agent)
                caps = config.capabilities if config else []
                roots = [
                    await self.skill_root(p) for c in caps if isinstance(c, SkillsCapability) for p in c.paths
                ]
                for capability in [
                    *roots,
                    *(self.mcp_server(c.mcp) for c in caps if isinstance(c, McpCapability)),
                ]:
                    self.registry.add(capability, where)
                self._agents.add(key)
            self._serve(session_id, key)
        return Scope(ScopeLevel.TURN, key, session_id, turn_id)

    def mcp_server(self, name: str) -> McpServerCap | FunctionToolsCap:
        """The tool source a server name stands for: an MCP server, or a plugin's function tools."""
        if (functions := self.function_tools(name)) is not None:
            return functions
        if name not in self.mcp:
            self.mcp[name] = McpServerCap(self.pool, name)
        return self.mcp[name]

    def function_tools(self, name: str) -> FunctionToolsCap | None:
        """The plugin tools server `name` serves (`{plugin: ...}`), or None for an MCP server."""
        config = self.pool.servers.get(name)
        if config is None or config.plugin is None:
            return None
        if name not in self.functions:
            self.functions[name] = FunctionToolsCap(
                name,
                config.plugin,
                self.plugin_tools.get(config.plugin),
                sorted(self.plugin_tools),
                config.call_timeout,
            )
        return self.functions[name]

    async def skill_root(self, path: str) -> LocalSkillRoot:
        """A watched skill folder; `${tenant}` in its path is this host's tenant, `${VAR}` the worker's."""
        resolved = str(
            Path(os.path.expanduser(self.secrets.resolve(path.replace("${tenant}", self.tenant)))).resolve()
        )
        if resolved not in self.skill_roots:
            watcher = SkillRootWatcher(Path(resolved), source=f"skills:{resolved}")
            await watcher.start()
            self._watchers[resolved] = watcher
            self.skill_roots[resolved] = LocalSkillRoot(resolved)
            self.registry.add(watcher, POOL)  # observed only: a watcher serves no skills
        root = self.skill_roots[resolved]
        await root.load()  # the first scan, in a thread: nobody reads the folder on the event loop
        return root

    async def agent_folder(self, file: str) -> str:
        """Watch the folder of a Markdown agent's file; its change source (`agents:<folder>`)."""
        folder = str(Path(file).parent)
        source = f"agents:{folder}"
        if folder not in self._watchers:
            watcher = SkillRootWatcher(Path(folder), source=source)
            await watcher.start()
            self._watchers[folder] = watcher
            self.registry.add(watcher, POOL)  # observed only
        return source

    def background(self, work: Coroutine[Any, Any, None]) -> None:
        """Run `work` without blocking the activity; it is cancelled when the host closes."""
        task = asyncio.create_task(work)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    def keep(self, compiled: CompiledAgent) -> None:
        """Cache a compiled agent by digest (least recently stored first out)."""
        self.compiled[compiled.digest] = compiled
        self.compiled.move_to_end(compiled.digest)
        while len(self.compiled) > self.max_compiled:
            self.compiled.popitem(last=False)

    def track(self, workflow_id: str, sources: list[str]) -> None:
        self.sessions[workflow_id] = set(sources)
        self._serve(workflow_id)

    def _serve(self, workflow_id: str, agent: str = "") -> None:
        """Note the session as served now (with its agent, when known); beyond `max_sessions`, forget
        the least recently served."""
        previous = self._served.pop(workflow_id, "")
        self._served[workflow_id] = agent or previous
        if agent and agent != previous:
            self._agent_users[agent] += 1
            if previous:
                self._unuse_agent(previous)
        while len(self._served) > self.max_sessions:
            self.forget(next(iter(self._served)))

    def _unuse_agent(self, agent: str) -> None:
        """One session fewer uses `agent`; with the last, its registration goes (AGENT entries pile up
        with every version of an agent otherwise). A later session registers it again."""
        self._agent_users[agent] -= 1
        if self._agent_users[agent] <= 0:
            del self._agent_users[agent]
            self._agents.discard(agent)
            self.registry.clear_agent(agent)

    def _released(self, capability: object) -> None:
        """A skill's tool source that no turn uses any more leaves the pool; an MCP server's process
        stops (a turn that loads the skill again brings it back). Declared servers stay."""
        if not isinstance(capability, McpServerCap | FunctionToolsCap):
            return
        if capability.server in self.manifest.host.mcp_servers:
            return
        if isinstance(capability, McpServerCap):
            if self.mcp.get(capability.server) is capability:
                del self.mcp[capability.server]
            capability.close()
        elif self.functions.get(capability.server) is capability:
            del self.functions[capability.server]
        self.pool.remove_server(capability.server)

    async def source_digest(self, source: str) -> str | None:
        """A digest of what `source` offers now (tools, skills); None if this host does not hold it
        or cannot reach it (then nothing is compared)."""
        kind, _, name = source.partition(":")
        try:
            if kind == "mcp" and (cap := self.functions.get(name) or self.mcp.get(name)) is not None:
                offered: list[object] = [
                    [t.name, t.description, t.parameters] for t in await cap.list_tools()
                ]
                if isinstance(cap, SkillResource):
                    offered += [[e.name, e.description, e.uri] for e in await cap.list_skills()]
            elif kind == "skills" and name in self.skill_roots:
                offered = [[e.name, e.description, e.uri] for e in await self.skill_roots[name].list_skills()]
            elif kind == "agents" and name in self._watchers:
                offered = await asyncio.to_thread(_agent_files, Path(name))
            else:
                return None
        except (McpUnavailable, MCPError, TimeoutError, ExtensionError) as exc:
            log.info("no digest for %s: %s", source, exc)
            return None
        return hashlib.sha256(json.dumps(offered, sort_keys=True, default=str).encode()).hexdigest()[:16]

    async def recheck(self, manifest: Manifest, compiled: CompiledAgent, workflow_id: str) -> None:
        """A session this host had not served: tell it if its extensions changed while nobody watched."""
        try:
            await self.scope(manifest, compiled.agent, workflow_id, "-")  # watch its sources from now on
            changed = [
                source
                for source, digest in compiled.source_digests.items()
                if (now := await self.source_digest(source)) is not None and now != digest
            ]
            if changed and self.notify is not None:
                detail = f"{', '.join(changed)} changed since the agent was compiled"
                await self.notify(workflow_id, ExtensionsChanged(sources=changed, detail=detail))
        except Exception as exc:  # noqa: BLE001 - best effort: the next change notification still works
            log.info("could not re-check the extensions of %s: %s", workflow_id, exc)

    def _list_changed(self, server: str, kind: str) -> None:
        if server in self.mcp:
            self.mcp[server].list_changed(kind)

    async def _pump_changes(self) -> None:
        async for event in self.registry.changes():
            try:
                await self._changed(event)
            except Exception:
                log.exception("handling %s failed", event)

    async def _changed(self, event: ChangeEvent) -> None:
        """Refresh what changed, then tell every session this host served that depends on it."""
        root = self.skill_roots.get(event.source.removeprefix("skills:"))
        if root is not None:
            await asyncio.to_thread(root.refresh)
        log.info("extensions changed: %s %s", event.source, event.detail)
        if self.notify is None:
            return
        change = ExtensionsChanged(
            sources=[event.source], detail=f"{event.source} changed: {event.detail}".strip()
        )
        for workflow_id, sources in list(self.sessions.items()):
            if event.source in sources:
                try:
                    await self.notify(workflow_id, change)
                except Exception as exc:  # noqa: BLE001 - a finished session cannot be told; forget it
                    log.info("could not tell %s about %s: %s", workflow_id, event.source, exc)
                    self.forget(workflow_id)

    def forget(self, workflow_id: str) -> None:
        """This host no longer serves the session: drop its caches and its session and turn extensions."""
        self.sessions.pop(workflow_id, None)
        self.transcripts.pop(workflow_id)
        self.registry.clear_session(workflow_id)
        if (run := self.acp_runs.pop(workflow_id, None)) is not None:
            self.background(run.close())  # its ACP agent process stops
        if agent := self._served.pop(workflow_id, ""):
            self._unuse_agent(agent)

    async def model(self, specs: list[str]) -> Model:
        """The model for a spec chain, built on first use in a thread: building imports its provider's
        client library (`openai` took 6.6 s on a loaded machine), and an activity whose event loop
        is held that long misses its heartbeat timeout, so Temporal ran the request again (issue 38)."""
        key = tuple(specs)
        if key not in self._models:
            quotas, budgets = self.quotas, self.manifest.host.models.quotas
            self._models[key] = await asyncio.to_thread(
                build_model,
                specs,
                self.manifest.host.models.providers,
                self.local_models,
                self.secrets,
                wrap=(lambda model, spec: quotas.wrap(model, spec, budgets, self.tenant)) if quotas else None,
            )
        return self._models[key]

    def transcript(self, workflow_id: str, base_len: int, base_digest: str) -> CachedTranscript | None:
        """This worker's copy of a session's first `base_len` messages, if it provably matches."""
        cached = self.transcripts.get(workflow_id)
        if cached is None or len(cached.messages) != base_len or cached.digest != base_digest:
            self.transcript_misses += 1
            return None
        return cached

    def remember(self, workflow_id: str, cached: CachedTranscript) -> None:
        """Cache a transcript (evicted under the cache's bounds, only the copy goes: the session stays
        served, its turn's extensions keep running)."""
        self.transcripts.put(workflow_id, cached)

    async def close(self) -> None:
        if self._pump is not None:
            self._pump.cancel()
        for task in list(self._tasks):
            task.cancel()
        await asyncio.gather(*(run.close() for run in self.acp_runs.values()))
        try:
            stopped = await asyncio.gather(
                *(w.stop() for w in self._watchers.values()), return_exceptions=True
            )
            for failure in (r for r in stopped if isinstance(r, BaseException)):
                log.warning("stopping a skill watcher failed: %s", failure)
            for cap in self.mcp.values():
                cap.close()
            await self.registry.close()
        finally:
            await self.pool.close()


def _agent_files(folder: Path) -> list[object]:
    """What a folder of Markdown agents says (names and contents), for its digest."""
    return [[p.name, p.read_text(errors="replace")] for p in sorted(folder.glob("*.md")) if p.is_file()]


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
