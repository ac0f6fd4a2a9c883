"""How the pool (pool.py) reaches an MCP server and learns that a connection died: streamable HTTP
on an httpx client of the connection's own, a transport whose read stream reports its end (the
server process exited, the change stream closed) before any call fails on it, and the file a stdio
server's stderr goes to."""

from __future__ import annotations

import re
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from types import TracebackType
from typing import Any, Self, TextIO

import anyio
from mcp.client import Transport
from mcp.client._transport import ReadStream, TransportStreams
from mcp.client.streamable_http import streamable_http_client
from mcp.shared._httpx_utils import create_mcp_http_client
from mcp.shared.message import SessionMessage

from agentwolf.paths import data_dir

_FILE_NAME = re.compile(r"[^A-Za-z0-9_.-]")


def stderr_log(server: str) -> TextIO:
    """`$WOLF_HOME/logs/mcp-<server>.log`, appended to: a server's stderr stays out of the worker's log."""
    logs = data_dir() / "logs"
    logs.mkdir(exist_ok=True)
    return open(logs / f"mcp-{_FILE_NAME.sub('_', server)}.log", "a", encoding="utf-8")  # noqa: SIM115


@asynccontextmanager
async def http_transport(url: str, headers: dict[str, str]) -> AsyncIterator[TransportStreams]:
    """Streamable HTTP on an httpx client of its own, closed with the connection: the SDK leaves a
    client it is given open, and one per reconnect would pile up."""
    async with (
        create_mcp_http_client(headers=headers) as http,
        streamable_http_client(url, http_client=http) as streams,
    ):
        yield streams


@asynccontextmanager
async def watched(transport: Transport, on_end: Callable[[], None]) -> AsyncIterator[TransportStreams]:
    """`transport` with a read stream that calls `on_end` when it ends."""
    async with transport as (read, write):
        yield _EndWatch(read, on_end), write


class _EndWatch:
    """A transport's read stream that reports its end (EOF: the server process exited, or the
    transport closed), so the pool learns of a dead connection without a call failing on it."""

    def __init__(self, stream: ReadStream[SessionMessage | Exception], on_end: Callable[[], None]) -> None:
        self._stream = stream
        self._on_end = on_end

    def __getattr__(self, name: str) -> Any:
        return getattr(self._stream, name)  # `last_context`, read by the SDK's dispatcher

    def __aiter__(self) -> Self:
        return self

    async def __anext__(self) -> SessionMessage | Exception:
        try:
            return await self.receive()
        except anyio.EndOfStream:
            raise StopAsyncIteration from None

    async def receive(self) -> SessionMessage | Exception:
        try:
            return await self._stream.receive()
        except (anyio.EndOfStream, anyio.ClosedResourceError):
            self._on_end()
            raise

    async def aclose(self) -> None:
        await self._stream.aclose()

    async def __aenter__(self) -> Self:
        await self._stream.__aenter__()
        return self

    async def __aexit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> bool | None:
        return await self._stream.__aexit__(exc_type, exc, tb)
