"""Tool calls that wait for approval, as the OpenAI API says them.

A turn that asks for approval ends its response there (TurnView.waiting): the Responses API lists an
`mcp_approval_request` item per waiting call (status `incomplete`, reason `approval_required`), Chat
Completions finishes with `approval_required` and names the calls. The answer is the Responses API's
own: a response whose `previous_response_id` names that one and whose input is
`mcp_approval_response` items; it goes on with the same turn from where the answers were given."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from agentwolf.client.wolf_client import WolfClient
from agentwolf.protocols.openai_api.targeting import ResponseId
from agentwolf.protocols.served import ApiError

REQUEST_PREFIX = "mcpr_"
"""An approval request item's id: this and the waiting call's id."""
FINISH = "approval_required"
"""Chat Completions' finish_reason (and the Responses API's incomplete reason) for a turn that waits."""


@dataclass(frozen=True)
class Answer:
    call_id: str
    approve: bool
    reason: str | None = None


def answers_of(items: Any) -> list[Answer]:
    """The `mcp_approval_response` items of a Responses input (none: the input is messages)."""
    if not isinstance(items, list) or not any(
        isinstance(i, dict) and i.get("type") == "mcp_approval_response" for i in items
    ):
        return []
    out = []
    for i, item in enumerate(items):
        request = item.get("approval_request_id") if isinstance(item, dict) else None
        if (
            not isinstance(item, dict)
            or item.get("type") != "mcp_approval_response"
            or not isinstance(request, str)
            or not request.startswith(REQUEST_PREFIX)
            or not isinstance(item.get("approve"), bool)
        ):
            raise ApiError(
                400,
                f"input[{i}]: an input that answers approvals holds only mcp_approval_response items "
                "(approval_request_id from an mcp_approval_request item, approve true or false)",
                code="invalid_approval",
            )
        reason = item.get("reason")
        out.append(
            Answer(
                request.removeprefix(REQUEST_PREFIX),
                item["approve"],
                reason if isinstance(reason, str) else None,
            )
        )
    return out


async def answer(wolf: WolfClient, previous: ResponseId, answers: list[Answer]) -> ResponseId:
    """Give the answers to the previous response's turn; the response that follows it from here."""
    base = await wolf.event_offset(previous.session)
    for given in answers:
        try:
            if given.approve:
                await wolf.approve(previous.session, given.call_id)
            else:
                await wolf.deny(previous.session, given.call_id, given.reason)
        except ValueError as exc:  # no such call waits (answered already, or never asked)
            raise ApiError(409, str(exc), code="approval_not_waiting") from None
    return ResponseId(previous.session, previous.turn, base)


def waiting_note(calls: list[dict[str, Any]], response: ResponseId) -> str:
    """What a Chat Completions answer says when its turn waits: the calls and how to answer."""
    named = ", ".join(f"{c['name']}({c['arguments']}) [{c['id']}]" for c in calls)
    return (
        f"Waiting for approval: {named}. Answer with POST /v1/responses, previous_response_id "
        f"{response} and an mcp_approval_response input item per call (or `wolf approve`)."
    )
