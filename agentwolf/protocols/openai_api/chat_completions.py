"""Chat Completions (`/v1/chat/completions`) on the turn's Responses events."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from typing import Any

from starlette.requests import Request
from starlette.responses import JSONResponse, Response

from agentwolf.client.wolf_client import WolfClient
from agentwolf.protocols.openai_api.approvals import FINISH, waiting_note
from agentwolf.protocols.openai_api.settings import ChatRequest, checked
from agentwolf.protocols.openai_api.targeting import (
    SESSION_HEADER,
    ask,
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
    WAIT_LIMIT,
    ClientGone,
    TurnView,
    answered,
    follow,
    read_to_end,
    sse,
)
from agentwolf.protocols.served import (
    ApiError,
    json_body,
    principal_of,
    served_of,
    session_errors,
    session_of,
)
from agentwolf.workflows.types import Usage


@session_errors("session")
async def chat_completions(request: Request) -> Response:
    body = await json_body(request)
    params = checked(ChatRequest, body)
    served, principal = served_of(request), principal_of(request)
    model = model_of(body)
    instructions, messages = split_instructions(messages_of(body.get("messages"), "messages"))
    settings = params.turn_settings(instructions)
    no_client_tools(body)
    stream = flag(body, "stream")
    options = body.get("stream_options") or {}
    include_usage = isinstance(options, dict) and bool(options.get("include_usage"))
    target = await resolve_target(served, principal, model)
    wolf = served.wolf(principal)
    session = request.headers.get(SESSION_HEADER, "").strip()
    if session and session != "new":  # the session has the conversation: the last message only
        await session_of(wolf, target, session)
        rid = await ask(wolf, session, messages[-1][1], settings)
    else:  # stateless, or `X-Wolf-Session: new` for a session that stays for more turns
        owner = owner_of(principal, params.user)
        rid = await start(wolf, target, prompt_text(messages), settings, keep=session == "new", owner=owner)
    headers = {"X-Wolf-Session": rid.session, "X-Wolf-Response": str(rid)}
    view = TurnView(rid, model)
    if stream:
        return sse(_chat_chunks(wolf, view, include_usage), headers)
    try:
        await answered(request, read_to_end(wolf, view))
    except TimeoutError:
        raise ApiError(
            504,
            f"the turn did not finish in {WAIT_LIMIT:g} s; it goes on (GET /v1/responses/{rid})",
            "server_error",
            "turn_timeout",
            headers,
        ) from None
    except ClientGone:
        return Response(status_code=499)
    if view.status == "failed":
        raise ApiError(500, f"the turn failed: {view.final}", "server_error", "turn_failed", headers)
    content, finish = view.final or "", "length" if view.outcome == "limit" else "stop"
    if view.incomplete == FINISH:
        content, finish = (
            "\n\n".join(filter(None, [view.output_text, waiting_note(view.waiting_calls(), rid)])),
            FINISH,
        )
    choice = {
        "index": 0,
        "message": {"role": "assistant", "content": content, "refusal": None},
        "finish_reason": finish,
        "logprobs": None,
    }
    return JSONResponse(
        {
            "id": f"chatcmpl-{rid.session}_{rid.turn}_{rid.base}",
            "object": "chat.completion",
            "created": int(view.created),
            "model": model,
            "choices": [choice],
            "usage": _chat_usage(view.usage),
        },
        headers=headers,
    )


def _chat_usage(usage: Usage | None) -> dict[str, int]:
    usage = usage or Usage()
    return {
        "prompt_tokens": usage.input_tokens,
        "completion_tokens": usage.output_tokens,
        "total_tokens": usage.total_tokens,
    }


async def _chat_chunks(
    wolf: WolfClient, view: TurnView, include_usage: bool
) -> AsyncIterator[dict[str, Any]]:
    """Chat Completions chunks of the turn's text (every step's, a blank line between steps), then [DONE].

    Each SSE event's id is the sequence number of the Responses event it comes from (the turn is
    `X-Wolf-Response`, resumable with GET /v1/responses/{id}?stream=true&starting_after=N)."""
    rid = view.rid
    base = {
        "id": f"chatcmpl-{rid.session}_{rid.turn}_{rid.base}",
        "object": "chat.completion.chunk",
        "created": int(view.created),
        "model": view.model,
    }

    def chunk(delta: dict[str, Any], finish: str | None = None, **extra: Any) -> str:
        return json.dumps(
            {
                **base,
                "choices": [{"index": 0, "delta": delta, "finish_reason": finish, "logprobs": None}],
                **extra,
            }
        )

    messages = 0
    async for seq, kind, body in follow(wolf, view):
        if kind == "response.created":
            yield {"id": str(seq), "data": chunk({"role": "assistant", "content": ""})}
        elif kind == "response.output_item.added" and body["item"]["type"] == "message":
            messages += 1
            if messages > 1:
                yield {"id": str(seq), "data": chunk({"content": "\n\n"})}
        elif kind == "response.output_text.delta" and body["delta"]:
            yield {"id": str(seq), "data": chunk({"content": body["delta"]})}
        elif kind == "response.failed":
            error = view.error or {}
            yield {
                "id": str(seq),
                "data": json.dumps(
                    {
                        "error": {
                            "message": error.get("message"),
                            "type": "server_error",
                            "code": error.get("code"),
                        }
                    }
                ),
            }
            return
        elif kind == "response.incomplete" and view.incomplete == FINISH:
            note = waiting_note(view.waiting_calls(), rid)
            yield {"id": str(seq), "data": chunk({"content": ("\n\n" if messages else "") + note}, FINISH)}
            yield {"data": "[DONE]"}
            return
        elif kind in ("response.completed", "response.incomplete"):
            yield {"id": str(seq), "data": chunk({}, "length" if view.outcome == "limit" else "stop")}
            if include_usage:
                yield {"data": json.dumps({**base, "choices": [], "usage": _chat_usage(view.usage)})}
            yield {"data": "[DONE]"}
            return
