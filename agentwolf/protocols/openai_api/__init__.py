"""The OpenAI-compatible API: `/v1/models`, `/v1/chat/completions` and `/v1/responses` on `WolfClient`.

Nothing is kept between requests. A response id names where its turn lives,
`resp_<session>_<turn>_<base>`: the session, the turn's number and the session's event offset before
the turn was asked for. Everything a response says (status, output, usage, its streaming events) is
read again from the session's events after `base`, so any `wolf serve` process answers for any
response, and a stream resumed with `starting_after` (or `Last-Event-ID`) continues exactly.

Sequence numbers are positions, not counts. Each durable event after `base` opens a slot of
`SLOT` numbers: `(offset - base + 1) * SLOT + sub`. What a durable event itself produces (an output
item done, a tool call added, the response completed) takes subs 0-9 in order; text streamed after
it takes `TEXT + end`, `end` being where the delta ends in its step's text. Streamed text arrives in
whatever pieces a follower happened to read, but its positions do not depend on them: a resumed
stream re-reads the running step's text from its start (agentwolf/client/live.py) and drops what
the client's sequence number says it has.

A streamed delta cannot be taken back. When a model request is retried after part of its text was
sent (a lost worker, a provider error mid-stream: `attempt_superseded`), the retry's text is taken up
from where the sent text ended and the final `output_text.done` / `message` carry the true text:
a client that shows deltas may show the first attempt's start joined to the retry's rest. This is
a limit of both OpenAI streaming protocols; retries after text was streamed are rare."""

from __future__ import annotations

from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import BaseRoute, Route

from agentwolf.protocols.openai_api.chat_completions import chat_completions
from agentwolf.protocols.openai_api.responses import cancel_response, create_response, retrieve_response
from agentwolf.protocols.openai_api.targeting import ResponseId
from agentwolf.protocols.openai_api.turn_view import SLOT, TurnView
from agentwolf.protocols.served import principal_of, served_of

__all__ = ["SLOT", "ResponseId", "TurnView", "routes"]


async def list_models(request: Request) -> Response:
    principal = principal_of(request)
    targets = await served_of(request).models(principal)
    data = [{"id": t.model, "object": "model", "created": 0, "owned_by": principal.tenant} for t in targets]
    return JSONResponse({"object": "list", "data": data})


async def get_model(request: Request) -> Response:
    principal = principal_of(request)
    target = await served_of(request).resolve(principal, request.path_params["model"])
    return JSONResponse({"id": target.model, "object": "model", "created": 0, "owned_by": principal.tenant})


def routes() -> list[BaseRoute]:
    return [
        Route("/v1/models", list_models, methods=["GET"]),
        Route("/v1/models/{model:path}", get_model, methods=["GET"]),
        Route("/v1/chat/completions", chat_completions, methods=["POST"]),
        Route("/v1/responses", create_response, methods=["POST"]),
        Route("/v1/responses/{response_id}", retrieve_response, methods=["GET"]),
        Route("/v1/responses/{response_id}/cancel", cancel_response, methods=["POST"]),
    ]
