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

import asyncio
import json
import logging
import re
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from typing import Any

from sse_starlette import EventSourceResponse, ServerSentEvent
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import BaseRoute, Route
from temporalio.client import WorkflowUpdateFailedError
from temporalio.service import RPCError

from agentwolf.client.wolf_client import WolfClient
from agentwolf.protocols.app import (
    ApiError,
    Served,
    Target,
    json_body,
    not_found,
    principal_of,
    served_of,
    session_errors,
)
from agentwolf.protocols.auth import SERVED, Principal
from agentwolf.workflows.types import Event, SessionStatus, Usage

log = logging.getLogger(__name__)

SLOT = 10_000_000
"""Sequence numbers per durable event (text positions included: a step's text is far shorter)."""
TEXT = 12
"""Where streamed text starts in a slot (subs below: what durable events and item openings emit)."""
OPEN_ITEM, OPEN_PART = 10, 11
HEARTBEAT = 15.0
"""Seconds between SSE comment lines on an idle stream (proxies close silent connections)."""
RETRY_AFTER = "2"
FOLLOW_TRIES = 5
"""Times a stream follows the session's events again after a subscription broke."""
SESSION_HEADER = "x-wolf-session"
CUT = re.compile(r"\.\.\. \[\d+ chars\]$")
"""How the workflow marks an event text cut to its limit (the transcript keeps it whole)."""


# -- ids -------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class ResponseId:
    session: str
    turn: int
    base: int

    def __str__(self) -> str:
        return f"resp_{self.session}_{self.turn}_{self.base}"

    @property
    def turn_id(self) -> str:
        return f"turn-{self.turn}"

    @classmethod
    def parse(cls, value: str) -> ResponseId:
        """Any id that is not one of ours is as unknown as a missing one."""
        parts = value.removeprefix("resp_").removeprefix("chatcmpl-").rsplit("_", 2)
        if (
            len(parts) != 3
            or not parts[0]
            or not parts[1].isdigit()
            or not parts[2].isdigit()
            or "/" in parts[0]
        ):
            raise not_found("response")
        return cls(parts[0], int(parts[1]), int(parts[2]))


def _turn_number(turn_id: str) -> int:
    return int(turn_id.rsplit("-", 1)[-1])


# -- request bodies --------------------------------------------------------------------------------


def _text_of(content: Any, where: str) -> str:
    """A message's content as text: a string, or text parts (`text`, `input_text`, `output_text`)."""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        texts = []
        for part in content:
            if (
                isinstance(part, dict)
                and part.get("type") in ("text", "input_text", "output_text")
                and isinstance(part.get("text"), str)
            ):
                texts.append(part["text"])
            else:
                kind = part.get("type") if isinstance(part, dict) else type(part).__name__
                raise ApiError(
                    400, f"{where}: only text content is supported, not {kind!r}", code="unsupported_content"
                )
        return "".join(texts)
    if content is None:
        return ""
    raise ApiError(400, f"{where}: content must be a string or a list of text parts", code="invalid_content")


def _messages(items: Any, where: str) -> list[tuple[str, str]]:
    """(role, text) of each message; the last one must be the user's."""
    if not isinstance(items, list) or not items:
        raise ApiError(400, f"{where} must be a non-empty list of messages", code="invalid_messages")
    out = []
    for i, item in enumerate(items):
        if (
            not isinstance(item, dict)
            or item.get("type", "message") != "message"
            or not isinstance(item.get("role"), str)
        ):
            raise ApiError(400, f"{where}[{i}] must be a message with a role", code="invalid_messages")
        out.append((item["role"], _text_of(item.get("content"), f"{where}[{i}]")))
    if out[-1][0] != "user" or not out[-1][1].strip():
        raise ApiError(400, f"the last of {where} must be a user message with text", code="invalid_messages")
    return out


def _prompt(messages: list[tuple[str, str]], instructions: str | None = None) -> str:
    """The text a new session's first turn is asked with.

    WolfClient cannot seed a session with a transcript (SessionInput.transcript is the continue-as-new
    snapshot, and a session started with one ignores its first prompt), so the earlier messages of a
    stateless request travel as context at the start of the prompt text, and the agent's own
    instructions stay its system prompt."""
    *earlier, (_, last) = messages
    if not earlier and not instructions:
        return last
    lines = ["The conversation so far (you are the assistant):"]
    if instructions:
        lines.append(f"[instructions] {instructions}")
    lines += [f"[{role}] {text}" for role, text in earlier]
    return "\n".join([*lines, "", "The user's message now:", last])


async def _resolve(served: Served, principal: Principal, model: str) -> Target:
    """`served.resolve`, without reading the registry for an agent of a served manifest file (its
    names have no `/`; registry configs' are `CONFIG/AGENT`): a request's first token waits for this."""
    manifest = served.manifest
    known = manifest is not None and (model in manifest.agents or model in manifest.teams)
    if known and "/" not in model and principal.may_use(SERVED, model):
        return Target(model, model, {"manifest": manifest})
    return await served.resolve(principal, model)


def _no_client_tools(body: dict[str, Any]) -> None:
    if body.get("tools"):
        raise ApiError(
            400,
            "client-side tools are not supported: the agent's own tools run on the server",
            code="unsupported_tools",
        )


def _model(body: dict[str, Any]) -> str:
    model = body.get("model")
    if not isinstance(model, str) or not model:
        raise ApiError(400, "`model` is required (GET /v1/models lists yours)", code="missing_model")
    return model


def _flag(body: dict[str, Any], name: str) -> bool:
    value = body.get(name, False)
    if not isinstance(value, bool) and value is not None:
        raise ApiError(400, f"`{name}` must be true or false", code="invalid_value")
    return bool(value)


# -- starting and continuing turns -----------------------------------------------------------------


async def _ask(wolf: WolfClient, session_id: str, text: str) -> ResponseId:
    """One more turn on an existing session (only this text is sent)."""
    base = await wolf.event_offset(session_id)
    try:
        turn_id = await wolf.prompt(session_id, text)
    except WorkflowUpdateFailedError as exc:
        message = str(getattr(exc.cause, "message", None) or exc.cause or exc)
        if "double_texting" in message:
            raise ApiError(409, f"session busy: {message}", code="session_busy") from None
        if "max_queued" in message:
            raise ApiError(
                429, message, "rate_limit_error", "too_many_queued", {"Retry-After": RETRY_AFTER}
            ) from None
        if "closed" in message:
            raise ApiError(409, f"session {session_id!r} is closed", code="session_closed") from None
        raise ApiError(400, message, code="prompt_refused") from None
    except RPCError as exc:
        if "completed" in str(exc) or "closed" in str(exc):
            raise ApiError(409, f"session {session_id!r} is closed", code="session_closed") from None
        raise
    return ResponseId(session_id, _turn_number(turn_id), base)


async def _start(wolf: WolfClient, target: Target, text: str, *, keep: bool) -> ResponseId:
    """A new session whose first turn is `text`: a background task that closes after it unless `keep`."""
    try:
        if keep:
            session_id = await wolf.start_session(target.agent, prompt=text, **target.source)
        else:
            session_id = await wolf.submit(text, target.agent, **target.source)
    except ValueError as exc:
        raise ApiError(400, str(exc), code="invalid_request") from None
    return ResponseId(session_id, 1, 0)  # a fresh session's first turn, from its first event


# -- one turn as the Responses API sees it ---------------------------------------------------------

Out = tuple[int, str, dict[str, Any]]
"""(sequence number, event type, event fields)."""


@dataclass
class TurnView:
    """A turn's events turned into a Response and its streaming events (see the module docstring).

    `after`: the client has every event up to this sequence number (a resumed stream)."""

    rid: ResponseId
    model: str
    created: float = field(default_factory=time.time)
    after: int = -1
    background: bool | None = None
    status: str = "queued"
    items: list[dict[str, Any]] = field(default_factory=list)
    usage: Usage | None = None
    error: dict[str, Any] | None = None
    outcome: str | None = None
    final: str | None = None
    """The turn's answer (turn_finished's text)."""
    done: bool = False
    _open: dict[int, dict[str, Any]] = field(default_factory=dict)
    """Message items of steps whose text has not ended, by step."""
    _sent: dict[int, int] = field(default_factory=dict)
    """How much of each step's text has been streamed (a retried attempt continues from there)."""
    _calls: dict[str, dict[str, Any]] = field(default_factory=dict)

    def restart(self, after: int) -> None:
        """Read the turn again from its start for a client that has everything up to `after`."""
        self.__dict__.update(TurnView(self.rid, self.model, self.created, after, self.background).__dict__)

    def start(self) -> list[Out]:
        return self._filter(
            [
                (0, "response.created", {"response": self.body(status="in_progress")}),
                (1, "response.in_progress", {"response": self.body(status="in_progress")}),
            ]
        )

    def feed(self, offset: int, event: Event) -> list[Out]:
        if self.done:
            return []
        slot = (offset - self.rid.base + 1) * SLOT
        if event.turn_id != self.rid.turn_id:
            if event.kind == "session_closed":  # the session ended without running (or finishing) this turn
                self.status, self.done = "cancelled", True
                self.error = {
                    "code": "session_closed",
                    "message": "the session closed before this response finished",
                }
                return self._filter([(slot, "response.failed", {"response": self.body()})])
            return []
        kind = event.kind
        if kind == "turn_started":
            self.status = "in_progress"
            self.created = event.at.timestamp()
            return []
        if kind == "text_delta":
            return self._filter(self._text(slot, event), text_slot=slot)
        outs: list[Out] = []
        if kind == "model_text":
            outs += self._end_text(event.step or 0, event.text or "", "completed")
        elif kind == "tool_call_started" and event.call_id:
            item = {
                "type": "mcp_call",
                "id": f"mcp_{event.call_id}",
                "server_label": "wolf",
                "name": event.tool or "",
                "arguments": json.dumps(event.args or {}),
                "output": None,
                "error": None,
                "status": "in_progress",
            }
            self._calls[event.call_id] = item
            outs.append(self._added(item))
        elif kind == "tool_call_finished" and event.call_id in self._calls:
            item = self._calls.pop(event.call_id or "")
            failed = event.outcome not in (None, "success")
            item.update(
                status="failed" if failed else "completed",
                output=event.text,
                error=event.text if failed else None,
            )
            outs.append(self._item_done(item))
        elif kind == "turn_finished":
            outs += self._finish(event)
        return self._filter([(slot + i, t, body) for i, (_, t, body) in enumerate(outs)])

    # text ---------------------------------------------------------------------------------------

    def _text(self, slot: int, event: Event) -> list[Out]:
        step, chunk, start = event.step or 0, event.text or "", event.index or 0
        sent = self._sent.get(step, 0)
        end = start + len(chunk)
        if end <= sent:  # a retry repeating what was sent, or a joined text already shown
            return []
        chunk = chunk[max(0, sent - start) :]
        outs: list[Out] = []
        item = self._open.get(step)
        if item is None:
            item = self._open[step] = {
                "type": "message",
                "id": f"msg_{self.rid.session}_{self.rid.turn}_{step}",
                "status": "in_progress",
                "role": "assistant",
                "content": [],
            }
            outs.append((slot + OPEN_ITEM, *self._added(item)[1:]))
            part = {"type": "output_text", "text": "", "annotations": [], "logprobs": []}
            item["content"].append(part)
            outs.append(
                (
                    slot + OPEN_PART,
                    "response.content_part.added",
                    {**self._where(item), "content_index": 0, "part": dict(part)},
                )
            )
        item["content"][0]["text"] += chunk
        self._sent[step] = end
        outs.append(
            (
                slot + TEXT + end,
                "response.output_text.delta",
                {**self._where(item), "content_index": 0, "delta": chunk, "logprobs": []},
            )
        )
        return outs

    def _end_text(self, step: int, text: str, status: str) -> list[Out]:
        item = self._open.pop(step, None)
        if item is None:
            if not text:
                return []
            # No text was streamed (events read without live output): the item opens and ends here.
            self._sent[step] = len(text)
            item = {
                "type": "message",
                "id": f"msg_{self.rid.session}_{self.rid.turn}_{step}",
                "status": "in_progress",
                "role": "assistant",
                "content": [{"type": "output_text", "text": "", "annotations": [], "logprobs": []}],
            }
            opened = [self._added(item)]
        else:
            opened = []
        part = item["content"][0]
        if text and not (CUT.search(text) and part["text"].startswith(CUT.sub("", text))):
            part["text"] = text  # the step's true text (a cut event text loses to what was streamed whole)
        item["status"] = status
        where = {**self._where(item), "content_index": 0}
        return [
            *opened,
            (0, "response.output_text.done", {**where, "text": part["text"], "logprobs": []}),
            (0, "response.content_part.done", {**where, "part": dict(part)}),
            self._item_done(item),
        ]

    # items --------------------------------------------------------------------------------------

    def _where(self, item: dict[str, Any]) -> dict[str, Any]:
        return {"item_id": item["id"], "output_index": self.items.index(item)}

    def _added(self, item: dict[str, Any]) -> Out:
        self.items.append(item)
        return (
            0,
            "response.output_item.added",
            {"output_index": len(self.items) - 1, "item": json.loads(json.dumps(item))},
        )

    def _item_done(self, item: dict[str, Any]) -> Out:
        return (
            0,
            "response.output_item.done",
            {"output_index": self.items.index(item), "item": json.loads(json.dumps(item))},
        )

    def _finish(self, event: Event) -> list[Out]:
        outs = []
        for step in sorted(self._open):  # text an interrupt cut short
            outs += self._end_text(step, "", "incomplete")
        for item in self._calls.values():
            item["status"] = "incomplete"
        self.usage, self.outcome, self.final, self.done = event.usage, event.outcome, event.text, True
        self.status = {"completed": "completed", "interrupted": "cancelled", "limit": "incomplete"}.get(
            event.outcome or "", "failed"
        )
        if self.status == "failed":
            self.error = {"code": "turn_failed", "message": event.text or "the turn failed"}
        kind = {"completed": "response.completed", "failed": "response.failed"}.get(
            self.status, "response.incomplete"
        )
        return [*outs, (0, kind, {"response": self.body()})]

    def _filter(self, outs: list[Out], text_slot: int | None = None) -> list[Out]:
        """Drop what the client has (`after`); a delta in the slot the client stopped in loses the text
        it has."""
        kept = []
        for seq, kind, body in outs:
            if seq <= self.after:
                continue
            if kind == "response.output_text.delta" and text_slot is not None:
                have_slot, have_sub = divmod(self.after, SLOT)
                if have_slot * SLOT == text_slot and have_sub >= TEXT:
                    have, end = have_sub - TEXT, seq - text_slot - TEXT
                    body = {**body, "delta": body["delta"][max(0, len(body["delta"]) - (end - have)) :]}
            kept.append((seq, kind, body))
        return kept

    # the Response ---------------------------------------------------------------------------------

    @property
    def output_text(self) -> str:
        return "".join(p["text"] for i in self.items if i["type"] == "message" for p in i["content"])

    def body(self, status: str | None = None) -> dict[str, Any]:
        usage = self.usage
        return {
            "id": str(self.rid),
            "object": "response",
            "created_at": int(self.created),
            "model": self.model,
            "status": status or self.status,
            "background": self.background,
            "error": self.error,
            "incomplete_details": {"reason": "interrupted" if self.status == "cancelled" else "limit_reached"}
            if self.status in ("incomplete", "cancelled") and status is None
            else None,
            "instructions": None,
            "metadata": {},
            "output": json.loads(json.dumps(self.items)) if status is None else [],
            "parallel_tool_calls": True,
            "temperature": None,
            "tool_choice": "auto",
            "tools": [],
            "top_p": None,
            "usage": None
            if usage is None
            else {
                "input_tokens": usage.input_tokens,
                "input_tokens_details": {"cached_tokens": 0},
                "output_tokens": usage.output_tokens,
                "output_tokens_details": {"reasoning_tokens": 0},
                "total_tokens": usage.total_tokens,
            },
        }


async def _whole_answer(wolf: WolfClient, view: TurnView) -> None:
    """Event texts are cut at a limit; the session's last output is whole (if it is still this turn's)."""
    if view.final is None or not CUT.search(view.final):
        return
    status = await wolf.status(view.rid.session)
    if status.last_output and status.last_output.startswith(CUT.sub("", view.final)):
        view.final = status.last_output
        for item in reversed(view.items):
            if item["type"] == "message":
                item["content"][0]["text"] = status.last_output
                break


async def _run(wolf: WolfClient, view: TurnView) -> TurnView:
    """Read the turn's durable events until it ends."""
    async for offset, event in wolf.events(view.rid.session, view.rid.base, live=False):
        view.feed(offset, event)
        if view.done:
            break
    await _whole_answer(wolf, view)
    return view


async def _snapshot(wolf: WolfClient, view: TurnView) -> TurnView:
    """What the turn's durable events say now (it may still run)."""
    end = await wolf.event_offset(view.rid.session)
    if end > view.rid.base:
        async for offset, event in wolf.events(view.rid.session, view.rid.base, live=False):
            view.feed(offset, event)
            if view.done or offset >= end - 1:
                break
    if not view.done and view.status == "queued":
        status = await wolf.status(view.rid.session)
        if status.state == "done":
            view.status, view.error = "cancelled", {"code": "session_closed", "message": "the session closed"}
    await _whole_answer(wolf, view)
    return view


async def _stream(wolf: WolfClient, view: TurnView) -> AsyncIterator[Out]:
    """The turn's streaming events from the client's position on, live text included.

    A subscription that breaks (a Temporal hiccup under load) is taken up again from the turn's
    start, skipping what was sent: sequence numbers are positions, so nothing repeats."""
    sent = view.after
    for out in view.start():
        sent = out[0]
        yield out
    for attempt in range(1, FOLLOW_TRIES + 1):
        try:
            async for offset, event in wolf.events(view.rid.session, view.rid.base):
                for out in view.feed(offset, event):
                    sent = out[0]
                    yield out
                if view.done:
                    return
            return  # the session's events ended
        except Exception as exc:
            if attempt == FOLLOW_TRIES:
                raise
            log.warning(
                "events of %s broke (%r); following again after sequence number %d", view.rid, exc, sent
            )
            await asyncio.sleep(0.2 * attempt)
            view.restart(sent)


class _Heartbeat(ServerSentEvent):
    """A comment line without the blank line that would end an event.

    The openai client's SSE decoder (rightly, per the spec) dispatches an event at every blank line
    once an event id has been seen, and then fails to decode its empty data as JSON: `: ping` plus a
    blank line breaks its streams after the first heartbeat. A lone comment line is ignored until the
    next event's lines follow it."""

    def encode(self) -> bytes:
        return b": ping\n"


def _sse(outs: AsyncIterator[dict[str, Any]], headers: dict[str, str]) -> EventSourceResponse:
    return EventSourceResponse(
        outs,
        ping=HEARTBEAT,
        ping_message_factory=_Heartbeat,
        headers={"Cache-Control": "no-cache", **headers},
        sep="\n",
    )


def _starting_after(request: Request) -> int:
    value = request.query_params.get("starting_after") or request.headers.get("last-event-id") or "-1"
    try:
        return int(value)
    except ValueError:
        raise ApiError(400, "starting_after must be a sequence number", code="invalid_value") from None


# -- routes ----------------------------------------------------------------------------------------


async def list_models(request: Request) -> Response:
    principal = principal_of(request)
    targets = await served_of(request).models(principal)
    data = [{"id": t.model, "object": "model", "created": 0, "owned_by": principal.tenant} for t in targets]
    return JSONResponse({"object": "list", "data": data})


async def get_model(request: Request) -> Response:
    principal = principal_of(request)
    target = await served_of(request).resolve(principal, request.path_params["model"])
    return JSONResponse({"id": target.model, "object": "model", "created": 0, "owned_by": principal.tenant})


@session_errors("session")
async def chat_completions(request: Request) -> Response:
    body = await json_body(request)
    served, principal = served_of(request), principal_of(request)
    model = _model(body)
    messages = _messages(body.get("messages"), "messages")
    _no_client_tools(body)
    stream = _flag(body, "stream")
    options = body.get("stream_options") or {}
    include_usage = isinstance(options, dict) and bool(options.get("include_usage"))
    target = await _resolve(served, principal, model)
    wolf = served.wolf(principal)
    session = request.headers.get(SESSION_HEADER, "").strip()
    if session and session != "new":
        rid = await _ask(
            wolf, session, messages[-1][1]
        )  # the session has the conversation: the last message only
    else:  # stateless, or `X-Wolf-Session: new` for a session that stays for more turns
        rid = await _start(wolf, target, _prompt(messages), keep=session == "new")
    headers = {"X-Wolf-Session": rid.session, "X-Wolf-Response": str(rid)}
    view = TurnView(rid, model)
    if stream:
        return _sse(_chat_chunks(wolf, view, include_usage), headers)
    await _run(wolf, view)
    if view.status == "failed":
        raise ApiError(500, f"the turn failed: {view.final}", "server_error", "turn_failed", headers)
    choice = {
        "index": 0,
        "message": {"role": "assistant", "content": view.final or "", "refusal": None},
        "finish_reason": "length" if view.outcome == "limit" else "stop",
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
    async for seq, kind, body in _stream(wolf, view):
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
        elif kind in ("response.completed", "response.incomplete"):
            yield {"id": str(seq), "data": chunk({}, "length" if view.outcome == "limit" else "stop")}
            if include_usage:
                yield {"data": json.dumps({**base, "choices": [], "usage": _chat_usage(view.usage)})}
            yield {"data": "[DONE]"}
            return


@session_errors("session")
async def create_response(request: Request) -> Response:
    body = await json_body(request)
    served, principal = served_of(request), principal_of(request)
    model = _model(body)
    _no_client_tools(body)
    stream, background = _flag(body, "stream"), _flag(body, "background")
    given = body.get("input")
    items = [{"role": "user", "content": given}] if isinstance(given, str) else given
    messages = _messages(items, "input")
    instructions = body.get("instructions")
    if instructions is not None and not isinstance(instructions, str):
        raise ApiError(400, "`instructions` must be a string", code="invalid_value")
    target = await _resolve(served, principal, model)
    wolf = served.wolf(principal)
    previous = body.get("previous_response_id")
    if previous is not None:
        if not isinstance(previous, str):
            raise ApiError(400, "`previous_response_id` must be a string", code="invalid_value")
        try:
            session = ResponseId.parse(previous).session
        except ApiError:
            raise not_found("previous response") from None
        rid = await _ask(wolf, session, _prompt(messages, instructions))
    else:  # `store: false`: nothing to continue from, so the session closes after this turn
        rid = await _start(
            wolf, target, _prompt(messages, instructions), keep=body.get("store", True) is not False
        )
    view = TurnView(rid, model, background=background)
    headers = {"X-Wolf-Session": rid.session}
    if stream:
        return _sse(_response_events(wolf, view), headers)
    if background:
        return JSONResponse(view.body(status="queued"), headers=headers)
    await _run(wolf, view)
    return JSONResponse(view.body(), headers=headers)


async def _response_events(wolf: WolfClient, view: TurnView) -> AsyncIterator[dict[str, Any]]:
    async for seq, kind, body in _stream(wolf, view):
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
        view.after = _starting_after(request)
        return _sse(_response_events(wolf, view), {"X-Wolf-Session": rid.session})
    await _snapshot(wolf, view)
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
            await asyncio.wait_for(_run(wolf, view), 30)
        except TimeoutError:
            view = await _snapshot(wolf, TurnView(rid, view.model))
        return JSONResponse(view.body())
    await _snapshot(wolf, view)
    if view.status == "queued":
        raise ApiError(
            409, "this response waits behind another turn; it can be cancelled once it runs", code="queued"
        )
    return JSONResponse(view.body())


def routes() -> list[BaseRoute]:
    return [
        Route("/v1/models", list_models, methods=["GET"]),
        Route("/v1/models/{model:path}", get_model, methods=["GET"]),
        Route("/v1/chat/completions", chat_completions, methods=["POST"]),
        Route("/v1/responses", create_response, methods=["POST"]),
        Route("/v1/responses/{response_id}", retrieve_response, methods=["GET"]),
        Route("/v1/responses/{response_id}/cancel", cancel_response, methods=["POST"]),
    ]
