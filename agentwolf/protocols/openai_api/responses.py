"""The Responses API (`/v1/responses`): create, retrieve (or resume its stream) and cancel."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from typing import Any

from starlette.requests import Request
from starlette.responses import JSONResponse, Response

from agentwolf.access import TenantError
from agentwolf.client.wolf_client import SessionNotFound, WolfClient
from agentwolf.protocols import turns
from agentwolf.protocols.openai_api.approvals import answer, answers_of
from agentwolf.protocols.openai_api.settings import ResponsesRequest, checked
from agentwolf.protocols.openai_api.targeting import (
    ResponseId,
    continue_from,
    flag,
    messages_of,
    model_of,
    no_client_tools,
    owner_of,
    prompt_text,
    resolve_target,
    split_instructions,
    start,
)
from agentwolf.protocols.openai_api.turn_view import (
    ClientGone,
    TurnView,
    answered,
    follow,
    read_to_end,
    snapshot,
    sse,
    starting_after,
)
from agentwolf.protocols.served import (
    ApiError,
    json_body,
    not_found,
    principal_of,
    reach,
    served_of,
    session_errors,
    session_of,
)
from agentwolf.protocols.turns import TurnRef
from agentwolf.workflows.types import SessionStatus


@session_errors("session")
async def create_response(request: Request) -> Response:
    body = await json_body(request)
    params = checked(ResponsesRequest, body)
    served, principal = served_of(request), principal_of(request)
    model = model_of(body)
    no_client_tools(body)
    stream, background = flag(body, "stream"), flag(body, "background")
    given = body.get("input")
    answers = answers_of(given)
    items = [{"role": "user", "content": given}] if isinstance(given, str) else given
    messages = [] if answers else messages_of(items, "input")
    given_instructions = body.get("instructions")
    if given_instructions is not None and not isinstance(given_instructions, str):
        raise ApiError(400, "`instructions` must be a string", code="invalid_value", param="instructions")
    instructions, messages = split_instructions(messages, given_instructions)
    settings = params.turn_settings(instructions)
    target = await resolve_target(served, principal, model)
    wolf = served.wolf(principal)
    previous = body.get("previous_response_id")
    if previous is not None:
        if not isinstance(previous, str):
            raise ApiError(400, "`previous_response_id` must be a string", code="invalid_value")
        try:
            named = ResponseId.parse(previous)
            await session_of(wolf, target, named.session)
        except (ApiError, SessionNotFound, TenantError):
            raise not_found("previous response") from None
        if answers:  # the same turn goes on
            rid = await answer(wolf, named, answers)
        else:
            rid = await continue_from(wolf, named, prompt_text(messages), settings)
    elif answers:
        raise ApiError(
            400, "approval answers need the previous_response_id that asked", code="missing_previous_response"
        )
    else:  # `store: false`: nothing to continue from, so the session closes after this turn
        keep, owner = body.get("store", True) is not False, owner_of(principal, params.user)
        rid = await start(wolf, target, prompt_text(messages), settings, keep=keep, owner=owner)
    view = TurnView(rid, model, background=background)
    headers = {"X-Wolf-Session": rid.session}
    if stream:
        return sse(_response_events(wolf, view), headers)
    if background:
        return JSONResponse(view.body(status="queued"), headers=headers)
    try:
        await answered(request, read_to_end(wolf, view))
    except TimeoutError:  # still in progress: GET /v1/responses/{id} reads on
        pass
    except ClientGone:
        return Response(status_code=499)
    return JSONResponse(view.body(), headers=headers)


async def _response_events(wolf: WolfClient, view: TurnView) -> AsyncIterator[dict[str, Any]]:
    async for seq, kind, body in follow(wolf, view):
        yield {
            "id": str(seq),
            "event": kind,
            "data": json.dumps({"type": kind, "sequence_number": seq, **body}),
        }


async def _turn(request: Request) -> tuple[WolfClient, ResponseId, SessionStatus, str]:
    """The response the path names: the caller's client, its id, its session's status and the model
    name it carries (the session's own agent and config). A turn the session never had, one of a
    session the key may not use, or one whose events are no longer kept is a 404."""
    served, principal = served_of(request), principal_of(request)
    rid = ResponseId.parse(request.path_params["response_id"])
    wolf = served.wolf(principal)
    status, target = await reach(served, principal, rid.session)
    if status.counters.turn_seq < rid.turn:
        raise not_found("response")
    if await turns.expired(wolf, status, TurnRef(rid.session, rid.turn_id, rid.base)):
        raise ApiError(
            404,
            f"response {rid} has expired: its session keeps only its latest events",
            "not_found_error",
            "response_expired",
        )
    return wolf, rid, status, target.model


@session_errors("response")
async def retrieve_response(request: Request) -> Response:
    wolf, rid, _, model = await _turn(request)
    view = TurnView(rid, model)
    if request.query_params.get("stream", "").lower() == "true":
        view.after = starting_after(request)
        return sse(_response_events(wolf, view), {"X-Wolf-Session": rid.session})
    await snapshot(wolf, view)
    return JSONResponse(view.body())


@session_errors("response")
async def cancel_response(request: Request) -> Response:
    """Interrupt the turn if it runs and answer once it has stopped; a finished one is left as it is."""
    wolf, rid, status, model = await _turn(request)
    view = TurnView(rid, model)
    if status.turn_id == rid.turn_id:
        await wolf.interrupt(rid.session, "cancelled through the API")
        try:
            await asyncio.wait_for(read_to_end(wolf, view), 30)
        except TimeoutError:
            view = await snapshot(wolf, TurnView(rid, view.model))
        return JSONResponse(view.body())
    await snapshot(wolf, view)
    if view.status == "queued":
        raise ApiError(
            409, "this response waits behind another turn; it can be cancelled once it runs", code="queued"
        )
    return JSONResponse(view.body())
