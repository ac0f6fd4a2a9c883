"""The Responses API (`/v1/responses`): create, retrieve (or resume its stream) and cancel."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from typing import Any

from starlette.requests import Request
from starlette.responses import JSONResponse, Response

from agentwolf.client.wolf_client import WolfClient
from agentwolf.protocols.app import (
    ApiError,
    Served,
    json_body,
    not_found,
    principal_of,
    served_of,
    session_errors,
)
from agentwolf.protocols.openai_api.targeting import (
    ResponseId,
    ask,
    flag,
    messages_of,
    model_of,
    no_client_tools,
    prompt_text,
    resolve_target,
    start,
)
from agentwolf.protocols.openai_api.turns import TurnView, follow, read_to_end, snapshot, sse, starting_after
from agentwolf.workflows.types import SessionStatus


@session_errors("session")
async def create_response(request: Request) -> Response:
    body = await json_body(request)
    served, principal = served_of(request), principal_of(request)
    model = model_of(body)
    no_client_tools(body)
    stream, background = flag(body, "stream"), flag(body, "background")
    given = body.get("input")
    items = [{"role": "user", "content": given}] if isinstance(given, str) else given
    messages = messages_of(items, "input")
    instructions = body.get("instructions")
    if instructions is not None and not isinstance(instructions, str):
        raise ApiError(400, "`instructions` must be a string", code="invalid_value")
    target = await resolve_target(served, principal, model)
    wolf = served.wolf(principal)
    previous = body.get("previous_response_id")
    if previous is not None:
        if not isinstance(previous, str):
            raise ApiError(400, "`previous_response_id` must be a string", code="invalid_value")
        try:
            session = ResponseId.parse(previous).session
        except ApiError:
            raise not_found("previous response") from None
        rid = await ask(wolf, session, prompt_text(messages, instructions))
    else:  # `store: false`: nothing to continue from, so the session closes after this turn
        rid = await start(
            wolf, target, prompt_text(messages, instructions), keep=body.get("store", True) is not False
        )
    view = TurnView(rid, model, background=background)
    headers = {"X-Wolf-Session": rid.session}
    if stream:
        return sse(_response_events(wolf, view), headers)
    if background:
        return JSONResponse(view.body(status="queued"), headers=headers)
    await read_to_end(wolf, view)
    return JSONResponse(view.body(), headers=headers)


async def _response_events(wolf: WolfClient, view: TurnView) -> AsyncIterator[dict[str, Any]]:
    async for seq, kind, body in follow(wolf, view):
        yield {
            "id": str(seq),
            "event": kind,
            "data": json.dumps({"type": kind, "sequence_number": seq, **body}),
        }


async def _turn(served: Served, wolf: WolfClient, rid: ResponseId) -> tuple[SessionStatus, str]:
    """The session's status and the model name its responses carry; a turn it never had is a 404."""
    status = await wolf.status(rid.session)
    if status.counters.turn_seq < rid.turn:
        raise not_found("response")
    if status.config_name and status.config_name != served.config_name:
        return status, f"{status.config_name}/{status.agent}"
    return status, status.agent


@session_errors("response")
async def retrieve_response(request: Request) -> Response:
    served, principal = served_of(request), principal_of(request)
    rid = ResponseId.parse(request.path_params["response_id"])
    wolf = served.wolf(principal)
    view = TurnView(rid, (await _turn(served, wolf, rid))[1])
    if request.query_params.get("stream", "").lower() == "true":
        view.after = starting_after(request)
        return sse(_response_events(wolf, view), {"X-Wolf-Session": rid.session})
    await snapshot(wolf, view)
    return JSONResponse(view.body())


@session_errors("response")
async def cancel_response(request: Request) -> Response:
    """Interrupt the turn if it runs and answer once it has stopped; a finished one is left as it is."""
    served, principal = served_of(request), principal_of(request)
    rid = ResponseId.parse(request.path_params["response_id"])
    wolf = served.wolf(principal)
    status, model = await _turn(served, wolf, rid)
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
