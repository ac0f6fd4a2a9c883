"""The host's MCP connection pool: one live client per server, shared by every session and call.

Each connection is entered and exited by its own task, because the SDK's transports use anyio
scopes that must close in the task that opened them. Calls come from activity tasks.

A connection is dead as soon as its transport ends (the server process exits, the HTTP change
stream closes; mcp_transports.py watches for it), not when a call first fails on it: a call that
finds its connection dead connects anew before sending anything. A call in flight when the
connection dies fails and is not retried, since the server may have acted on it (at-most-once).
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping, Sequence
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from typing import Any, TextIO

import anyio
import mcp_types
from mcp import Client, StdioServerParameters
from mcp.client import Transport
from mcp.client.session import IncomingMessage, MessageHandlerFnT
from mcp.client.stdio import stdio_client
from mcp.client.subscriptions import ListenNotSupportedError, SubscriptionLost
from mcp.shared.dispatcher import ProgressFnT
from mcp.shared.exceptions import MCPError

from agentwolf.config.manifest import McpServerConfig
from agentwolf.config.placeholders import MissingVariable
from agentwolf.config.policy import NO_SECRETS, PolicyError, Secrets, WorkerPolicy
from agentwolf.config.session_servers import SESSION_SERVER
from agentwolf.extensions.mcp_transports import http_transport, stderr_log, watched
from agentwolf.isolation import unprivileged
from agentwolf.telemetry import metrics

log = logging.getLogger(__name__)

_CONNECTION_LOST = {mcp_types.CONNECTION_CLOSED}

ListKind = str
"""`tools`, `prompts` or `resources`: which of a server's lists changed."""
OnListChanged = Callable[[str, ListKind], None]

_NOTIFICATION_KINDS: dict[type, ListKind] = {
    mcp_types.ToolListChangedNotification: "tools",
    mcp_types.PromptListChangedNotification: "prompts",
    mcp_types.ResourceListChangedNotification: "resources",
}


class McpUnavailable(RuntimeError):
    """A server that cannot be reached; `permanent` when retrying cannot help (bad command, bad URL)."""

    def __init__(self, server: str, reason: str, *, permanent: bool = False) -> None:
        super().__init__(f"MCP server {server!r} is unavailable: {reason}")
        self.server = server
        self.permanent = permanent


@dataclass
class _Connection:
    name: str
    client: Client | None = None
    task: asyncio.Task[None] | None = None
    scope: anyio.CancelScope = field(default_factory=anyio.CancelScope)
    stop: asyncio.Event = field(default_factory=asyncio.Event)
    in_flight: int = 0
    last_used: float = field(default_factory=time.monotonic)
    alive: bool = False
    http: bool = False
    errlog: TextIO | None = None
    """A stdio server's stderr: its own file under `$WOLF_HOME/logs/` (mcp_transports.stderr_log)."""


class McpPool:
    """Lazily connects, reuses, reconnects (with backoff) and evicts MCP clients for one host."""

    def __init__(
        self,
        servers: Mapping[str, McpServerConfig],
        *,
        secrets: Secrets | None = None,
        max_clients: int = 20,
        max_session_clients: int = 200,
        idle_timeout: float = 600.0,
        connect_attempts: int = 3,
        backoff: float = 0.5,
        allowed_commands: Sequence[str] | None = None,
        on_list_changed: OnListChanged | None = None,
    ) -> None:
        self.servers = dict(servers)
        """Declared servers; skills may add theirs (`add_server`)."""
        self._untrusted: set[str] = set()
        """Servers whose config came from a skill file: `${VAR}` is never resolved for them."""
        self.allowed_commands = None if allowed_commands is None else list(allowed_commands)
        """The manifest's own list: it can only narrow the worker policy."""
        self.on_list_changed = on_list_changed
        self.secrets = secrets or WorkerPolicy().secrets_for("default")
        self.max_clients = max_clients
        """Shared servers (the manifest's, skills') connected at once."""
        self.max_session_clients = max_session_clients
        """Session servers (an editor's, one process per session) connected at once: counted apart, so
        editors never evict the shared servers every session uses, nor those evict an editor's
        (stateful) server; past the cap the least recently used idle one goes (it restarts on demand)."""
        self.idle_timeout = idle_timeout
        self.connect_attempts = connect_attempts
        self.backoff = backoff
        self._connections: dict[str, _Connection] = {}
        self._closing: set[asyncio.Task[None]] = set()
        """Connections dropped and still shutting down (`close()` waits for them)."""
        self._locks: dict[str, asyncio.Lock] = {}
        self._reaper: asyncio.Task[None] | None = None
        self.connects: dict[str, int] = {}
        """How many times each server was started (or connected) by this pool."""

    # -- calls -------------------------------------------------------------------------------

    async def add_server(self, name: str, config: McpServerConfig, *, trusted: bool = True) -> None:
        """Declare a server at run time (one a skill brings); a changed config replaces the old one
        and closes its connection, so the next call starts the new command."""
        if not trusted:
            self._untrusted.add(name)
        if self.servers.get(name) != config:
            self.servers[name] = config
            if (conn := self._connections.get(name)) is not None:
                await self._discard(conn)

    def remove_server(self, name: str) -> None:
        """Forget a server added at run time (a skill's, once no turn uses it) and all kept about it,
        so servers that come and go do not pile up; its connection closes in the background."""
        self.servers.pop(name, None)
        self._untrusted.discard(name)
        self._locks.pop(name, None)
        self.connects.pop(name, None)
        if (conn := self._connections.get(name)) is not None:
            self._discard(conn)

    async def list_tools(self, server: str) -> list[mcp_types.Tool]:
        result = await self.use(
            server, lambda c: c.list_tools(), timeout=self._config(server).connect_timeout
        )
        return result.tools

    async def call_tool(
        self, server: str, tool: str, arguments: dict[str, Any], progress: ProgressFnT | None = None
    ) -> mcp_types.CallToolResult:
        timeout = self._config(server).call_timeout
        return await self.use(
            server,
            lambda c: c.call_tool(tool, arguments, read_timeout_seconds=timeout, progress_callback=progress),
        )

    async def use(
        self, server: str, op: Callable[[Client], Awaitable[Any]], timeout: float | None = None
    ) -> Any:
        """Run `op` on the server's pooled client (connecting on first use); a lost connection is dropped.

        `op` starts in this task right after `_get` found the connection alive: no other task runs in
        between, so a death already noticed never swallows the request.
        """
        conn = await self._get(server)
        assert conn.client is not None  # _get returns only live connections
        conn.in_flight += 1
        try:
            async with asyncio.timeout(timeout):
                result = await op(conn.client)
        except MCPError as exc:
            if exc.code in _CONNECTION_LOST:
                await self._discard(conn)
            raise
        except (OSError, EOFError) as exc:
            await self._discard(conn)
            raise McpUnavailable(server, f"connection lost: {exc}") from exc
        finally:
            conn.in_flight -= 1
            conn.last_used = time.monotonic()
        return result

    # -- lifecycle ---------------------------------------------------------------------------

    def _config(self, server: str) -> McpServerConfig:
        try:
            return self.servers[server]
        except KeyError:
            raise McpUnavailable(server, "not declared in host.mcp_servers", permanent=True) from None

    async def _get(self, server: str) -> _Connection:
        conn = self._connections.get(server)
        if conn is not None and conn.alive:
            return conn
        lock = self._locks.setdefault(server, asyncio.Lock())
        async with lock:
            conn = self._connections.get(server)
            if conn is not None and conn.alive:
                return conn
            return await self._connect(server)

    async def _connect(self, server: str) -> _Connection:
        config = self._config(server)
        await self._make_room(server)
        delay = self.backoff
        for attempt in range(1, self.connect_attempts + 1):
            try:
                conn = await self._open(server, config)
            except McpUnavailable as exc:
                if exc.permanent or attempt == self.connect_attempts:
                    raise
                log.warning(
                    "%s (attempt %d/%d); retrying in %.1fs", exc, attempt, self.connect_attempts, delay
                )
                await asyncio.sleep(delay)
                delay *= 2
            else:
                self._connections[server] = conn
                reason = "reconnect" if self.connects.get(server) else "first"
                metrics.count(metrics.MCP_CONNECTS, server=server, reason=reason)
                self.connects[server] = self.connects.get(server, 0) + 1
                if self._reaper is None:
                    self._reaper = asyncio.create_task(self._reap_idle())
                return conn
        raise AssertionError("unreachable")

    async def _open(self, server: str, config: McpServerConfig) -> _Connection:
        """Start or connect a server; placeholders are resolved here, at the moment of use."""
        secrets = NO_SECRETS.secrets_for(self.secrets.tenant) if server in self._untrusted else self.secrets
        conn = _Connection(server, http=config.command is None)
        try:
            transport: Transport
            if config.command is not None:
                program, args = self.secrets.policy.stdio_argv(config, self.allowed_commands)
                command, argv = unprivileged(program, [secrets.resolve(a) for a in args])
                params = StdioServerParameters(
                    command=command,
                    args=argv,
                    env={k: secrets.resolve(v) for k, v in config.env.items()},
                    cwd=config.cwd,
                    encoding_error_handler="replace",  # one bad byte must not stop the client's reader
                )
                conn.errlog = stderr_log(server)
                transport = stdio_client(params, errlog=conn.errlog)
            else:
                headers = {k: secrets.resolve(v) for k, v in config.headers.items()}
                url = secrets.resolve(config.url or "")
                self.secrets.policy.check_url(url)
                if server in self._untrusted:
                    await self.secrets.policy.check_reach(url)
                transport = http_transport(url, headers)
        except (FileNotFoundError, MissingVariable, PolicyError) as exc:
            raise McpUnavailable(server, str(exc), permanent=True) from exc
        conn.client = Client(
            watched(transport, lambda: self._ended(conn)), message_handler=self._notifications(server)
        )
        ready: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        conn.task = asyncio.create_task(self._hold(conn, ready), name=f"mcp:{server}")
        try:
            await asyncio.wait_for(asyncio.shield(ready), config.connect_timeout)
        except TimeoutError:
            conn.scope.cancel()
            await asyncio.wait({conn.task}, timeout=10.0)
            if ready.done():
                ready.exception()  # consumed: the timeout below is the error we report
            # A server that cannot initialize in time will not do better on a retry.
            raise McpUnavailable(
                server, f"no answer to initialize within {config.connect_timeout:g}s", permanent=True
            ) from None
        except Exception as exc:
            raise McpUnavailable(server, _describe(exc), permanent=_is_permanent(exc)) from exc
        return conn

    def _notifications(self, server: str) -> MessageHandlerFnT:
        """2025 sessions deliver `notifications/*/list_changed` here."""

        async def handle(message: IncomingMessage) -> None:
            kind = _NOTIFICATION_KINDS.get(type(message))
            if kind is not None and self.on_list_changed is not None:
                self.on_list_changed(server, kind)

        return handle

    async def _listen(self, conn: _Connection) -> None:
        """2026 sessions deliver list changes only on a `subscriptions/listen` stream.

        Over stateless HTTP that stream is all there is of a connection, so its end means the server
        went away: the connection is dropped, and the next call connects (and listens) anew.
        """
        assert conn.client is not None and self.on_list_changed is not None
        listening = False
        try:
            async with conn.client.listen(
                tools_list_changed=True, prompts_list_changed=True, resources_list_changed=True
            ) as subscription:
                listening = True
                async for event in subscription:
                    kind = type(event).__name__.removesuffix("ListChanged").lower()
                    if kind in ("tools", "prompts", "resources"):
                        self.on_list_changed(conn.name, kind)
        except ListenNotSupportedError:
            return  # a 2025 session: the message handler gets them
        except (MCPError, SubscriptionLost, TimeoutError) as exc:
            if not listening or not conn.http:
                log.info("MCP server %r: no list-change stream (%s)", conn.name, _describe(exc))
                return
        if conn.http:
            self._ended(conn)

    async def _hold(self, conn: _Connection, ready: asyncio.Future[None]) -> None:
        """Own the client's context for its whole life (anyio scopes are task-bound).

        It is stopped through `conn.stop` or `conn.scope`, never `Task.cancel()`: a native cancel
        defeats the SDK's shielded shutdown and leaks the server process.
        """
        assert conn.client is not None
        try:
            with conn.scope:
                async with conn.client, anyio.create_task_group() as listeners, _running(conn):
                    conn.alive = True
                    ready.set_result(None)
                    if self.on_list_changed is not None:
                        listeners.start_soon(self._listen, conn)
                    await conn.stop.wait()
                    listeners.cancel_scope.cancel()
            if not ready.done():
                ready.set_exception(TimeoutError())
        except BaseException as exc:  # noqa: BLE001 - reported to whoever waits for the connection
            if not ready.done():
                ready.set_exception(exc if isinstance(exc, Exception) else RuntimeError(repr(exc)))
            elif not isinstance(exc, asyncio.CancelledError):
                log.warning("MCP server %r connection ended: %s", conn.name, _describe(exc))
        finally:
            conn.alive = False
            if conn.errlog is not None:
                conn.errlog.close()

    def _ended(self, conn: _Connection) -> None:
        """The transport ended while the connection was in use: drop it now, so the next call
        reconnects first instead of failing on it (calls in flight have failed already)."""
        if conn.alive:
            log.warning("MCP server %r closed its connection; the next call reconnects", conn.name)
            self._discard(conn)

    def _discard(self, conn: _Connection) -> asyncio.Task[None]:
        """Forget `conn` at once (the next call connects anew) and close it in the background."""
        conn.alive = False
        if self._connections.get(conn.name) is conn:
            del self._connections[conn.name]
        task = asyncio.create_task(self._close(conn, timeout=1.0))
        self._closing.add(task)
        task.add_done_callback(self._closing.discard)
        return task

    async def _close(self, conn: _Connection, timeout: float) -> None:
        """Ask the client to shut down; after `timeout`, cancel its scope (the SDK then kills it)."""
        conn.alive = False  # its transport ending from here on is no news
        conn.stop.set()
        if conn.task is None:
            return
        done, _ = await asyncio.wait({conn.task}, timeout=timeout)
        if not done:
            conn.scope.cancel()
            await asyncio.wait({conn.task}, timeout=10.0)

    async def _make_room(self, server: str) -> None:
        """Room for `server` among its kind (shared or session servers): evict that kind's least
        recently used idle client at the cap."""
        session = server.startswith(SESSION_SERVER)
        cap = self.max_session_clients if session else self.max_clients
        live = [
            c for c in self._connections.values() if c.alive and c.name.startswith(SESSION_SERVER) == session
        ]
        if len(live) < cap:
            return
        idle = sorted((c for c in live if c.in_flight == 0), key=lambda c: c.last_used)
        if not idle:
            kind = "session" if session else "shared"
            raise McpUnavailable("*", f"pool full: {cap} {kind} server clients all busy")
        await self._discard(idle[0])

    async def _reap_idle(self) -> None:
        while True:
            await asyncio.sleep(max(self.idle_timeout / 4, 0.05))
            now = time.monotonic()
            for conn in list(self._connections.values()):
                if conn.in_flight == 0 and now - conn.last_used > self.idle_timeout:
                    log.info("closing idle MCP server %r", conn.name)
                    await self._discard(conn)

    def busy(self) -> bool:
        return any(c.in_flight for c in self._connections.values())

    def live_servers(self) -> list[str]:
        return [name for name, c in self._connections.items() if c.alive]

    async def close(self, timeout: float = 5.0) -> None:
        """Close every client (each gets `timeout` seconds, then its task is cancelled)."""
        if self._reaper is not None:
            self._reaper.cancel()
            self._reaper = None
        conns = list(self._connections.values())
        self._connections.clear()
        await asyncio.gather(*(self._close(c, timeout) for c in conns), *self._closing)


_processes = [0]
"""Stdio server processes the pools of this worker hold (`wolf_mcp_processes`)."""


@asynccontextmanager
async def _running(conn: _Connection) -> AsyncIterator[None]:
    """Count a stdio server's process while its client is open."""
    if conn.http:
        yield
        return
    _processes[0] += 1
    metrics.gauge(metrics.MCP_PROCESSES, _processes[0])
    try:
        yield
    finally:
        _processes[0] -= 1
        metrics.gauge(metrics.MCP_PROCESSES, _processes[0])


def _describe(exc: BaseException) -> str:
    if isinstance(exc, BaseExceptionGroup):
        return "; ".join(_describe(e) for e in exc.exceptions)
    return f"{type(exc).__name__}: {exc}" if str(exc) else type(exc).__name__


def _is_permanent(exc: BaseException) -> bool:
    if isinstance(exc, BaseExceptionGroup):
        return all(_is_permanent(e) for e in exc.exceptions)
    return isinstance(exc, (FileNotFoundError, PermissionError))
