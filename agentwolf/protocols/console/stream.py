"""A session's events as Server-Sent Events for the session page: the same durable events and live
deltas every front end follows (WolfClient.events), each as JSON with its offset as the SSE id, so
the browser's own reconnect (Last-Event-ID) resumes after the last event it saw."""

from __future__ import annotations

from collections.abc import AsyncIterator

from sse_starlette import EventSourceResponse, ServerSentEvent
from starlette.requests import Request
from starlette.responses import Response

from agentwolf.access import TenantError
from agentwolf.client.wolf_client import SessionNotFound
from agentwolf.protocols.served import ApiError, not_found, principal_of, reach, served_of

PING = 15
"""Seconds between keep-alive comments while nothing happens."""


def resume_offset(request: Request) -> int:
    """Where to start: after the Last-Event-ID the browser saw (its reconnect), else `?from=`, else 0."""
    seen = request.headers.get("last-event-id")
    try:
        return int(seen) + 1 if seen else max(0, int(request.query_params.get("from", "0")))
    except ValueError:
        raise ApiError(400, "the event offset must be a number", code="invalid_value") from None


async def events(request: Request) -> Response:
    sid = request.path_params["session_id"]
    served, principal = served_of(request), principal_of(request)
    try:
        status, _ = await reach(served, principal, sid)
    except (SessionNotFound, TenantError):
        raise not_found("session") from None
    wolf, offset = served.wolf(principal), resume_offset(request)

    async def sent() -> AsyncIterator[ServerSentEvent]:
        async for at, event in wolf.events(status.session_id, offset):
            yield ServerSentEvent(data=event.model_dump_json(exclude_none=True), id=str(at))
        yield ServerSentEvent(data="{}", event="end")

    return EventSourceResponse(sent(), ping=PING, headers={"Cache-Control": "no-cache"})
