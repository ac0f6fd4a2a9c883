"""JSON-RPC over newline-delimited JSON (ACP's stdio framing), answering what the ACP SDK would not.

The SDK's own framing logs and drops a line that is not JSON, dies on a line that is JSON but not an
object (`message.get` on a list ends the receive loop, and the agent with it), and reads a line of
any length into memory. This transport answers each of those with a JSON-RPC error (parse error,
invalid request, a line over `max_line` bytes, which is skipped without being held) and hands the
SDK only well-formed messages: a request or notification with a string method, or a response.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
from typing import Any

log = logging.getLogger(__name__)

MAX_LINE = 8 * 1024 * 1024
"""Bytes in one message: an editor's prompt with embedded files fits; more is refused, unread."""

PARSE_ERROR, INVALID_REQUEST = -32700, -32600


class NdjsonTransport:
    """One JSON-RPC peer on a byte stream pair (an `acp` Transport: send, receive, close)."""

    def __init__(
        self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter, *, max_line: int = MAX_LINE
    ) -> None:
        self.reader = reader
        self.writer = writer
        self.max_line = max_line
        self._writing = asyncio.Lock()

    async def send(self, message: dict[str, Any]) -> None:
        data = json.dumps(message, ensure_ascii=False, separators=(",", ":")).encode() + b"\n"
        async with self._writing:
            self.writer.write(data)
            await self.writer.drain()

    async def receive(self) -> dict[str, Any] | None:
        """The next well-formed message; None at the end of input."""
        while True:
            line = await self._line()
            if line is None:
                return None
            if not line.strip():
                continue
            try:
                message = json.loads(line)
            except (ValueError, UnicodeDecodeError) as exc:
                await self._error(None, PARSE_ERROR, "Parse error", f"not JSON: {exc}")
                continue
            problem = _problem(message)
            if problem is None:
                return message
            request_id = message.get("id") if isinstance(message, dict) else None
            await self._error(_valid_id(request_id), INVALID_REQUEST, "Invalid request", problem)

    async def _line(self) -> bytes | None:
        """One line, at most `max_line` bytes; a longer one is read past and answered with an error."""
        try:
            return await self.reader.readuntil(b"\n")
        except asyncio.IncompleteReadError as exc:
            return exc.partial or None
        except asyncio.LimitOverrunError as exc:
            consumed = exc.consumed
        while True:  # skip the rest of the oversized line without keeping it
            await self.reader.readexactly(consumed)
            try:
                await self.reader.readuntil(b"\n")
                break
            except asyncio.IncompleteReadError:
                return None
            except asyncio.LimitOverrunError as exc:
                consumed = exc.consumed
        await self._error(
            None, INVALID_REQUEST, "Invalid request", f"message over {self.max_line} bytes: not read"
        )
        return b""

    async def _error(self, request_id: Any, code: int, message: str, details: str) -> None:
        log.warning("JSON-RPC input refused: %s", details)
        error = {"code": code, "message": message, "data": {"details": details}}
        with contextlib.suppress(ConnectionError):
            await self.send({"jsonrpc": "2.0", "id": request_id, "error": error})

    async def close(self) -> None:
        """Flush what is written; the streams stay open (stdout is the process's, closed at exit)."""
        with contextlib.suppress(ConnectionError, OSError):
            await self.writer.drain()


def _valid_id(value: Any) -> str | int | None:
    return value if isinstance(value, str | int) and not isinstance(value, bool) else None


def _problem(message: Any) -> str | None:
    """Why `message` is not a JSON-RPC request, notification or response (None: it is one)."""
    if not isinstance(message, dict):
        return f"a message is a JSON object, not {type(message).__name__}"
    if "id" in message and message["id"] is not None and _valid_id(message["id"]) is None:
        return "an id is a string or an integer"
    if "method" in message:
        return None if isinstance(message["method"], str) else "a method is a string"
    if "id" not in message:
        return "neither a method nor an id"
    if "error" in message:
        return None if isinstance(message["error"], dict) else "an error is an object"
    return None if "result" in message else "a response has a result or an error"
