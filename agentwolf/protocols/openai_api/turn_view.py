"""One turn as the Responses API sees it: TurnView turns a turn's events into a Response and its
streaming events, which both APIs read (sequence numbers: the package docstring)."""

from __future__ import annotations

import asyncio
import json
import logging
import re
import time
from collections.abc import AsyncIterator, Awaitable
from dataclasses import dataclass, field
from typing import Any, TypeVar

from sse_starlette import EventSourceResponse, ServerSentEvent
from starlette.requests import Request

from agentwolf.client.live import STEP_ENDS
from agentwolf.client.wolf_client import WolfClient
from agentwolf.protocols.openai_api.targeting import ResponseId
from agentwolf.protocols.served import ApiError
from agentwolf.workflows.types import Event, PendingApproval, Usage

T = TypeVar("T")

log = logging.getLogger(__name__)

SLOT = 10_000_000
"""Sequence numbers per durable event (text positions included: a step's text is far shorter)."""
TEXT = 12
"""Where streamed text starts in a slot (subs below: what durable events and item openings emit)."""
OPEN_ITEM, OPEN_PART = 10, 11
WAIT_LIMIT = 600.0
"""Seconds a non-streamed request waits for its turn (a streamed one, or GET, follows it on)."""
HEARTBEAT = 15.0
"""Seconds between SSE comment lines on an idle stream (proxies close silent connections)."""
FOLLOW_TRIES = 5
"""Times a stream follows the session's events again after a subscription broke."""
CUT = re.compile(r"\.\.\. \[\d+ chars\]$")
"""How the workflow marks an event text cut to its limit (the transcript keeps it whole)."""

Out = tuple[int, str, dict[str, Any]]
"""(sequence number, event type, event fields)."""


@dataclass
class TurnView:
    """A turn's events turned into a Response and its streaming events (see the package docstring).

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
    incomplete: str | None = None
    """Why an incomplete response stopped (`approval_required`: its turn waits for approval)."""
    asking: int | None = None
    """The slot of the approval request that ends this response, once one came."""
    _open: dict[int, dict[str, Any]] = field(default_factory=dict)
    """Message items of steps whose text has not ended, by step."""
    _sent: dict[int, int] = field(default_factory=dict)
    """How much of each step's text has been streamed (a retried attempt continues from there)."""
    _calls: dict[str, dict[str, Any]] = field(default_factory=dict)
    _answered: int = 0
    """The last step whose response the events up to the client's position (`after`) showed."""
    _ended: set[int] = field(default_factory=set)
    """Steps whose end the events up to the client's position showed."""
    _client_step: int | None = None
    """The step whose text the client was given last (resumed streams): that of the first text from
    the client's position on, if that step had not ended there and could run then (live.py shows
    a step's text only once the one before it answered); -1: none."""

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
        if self.status == "queued":  # (a response that continues a turn after an approval starts late)
            self.status = "in_progress"
        if (kind in STEP_ENDS or kind == "turn_started") and slot <= self.after:
            self._answered = max(self._answered, event.step or 0)
            if kind in STEP_ENDS:
                self._ended.add(event.step or 0)
        if kind == "turn_started":
            self.status = "in_progress"
            self.created = event.at.timestamp()
            return []
        if kind == "text_delta":
            return self._filter(self._text(slot, event))
        outs: list[Out] = []
        if kind == "model_text":
            outs += self._end_text(event.step or 0, event.text or "", "completed")
        elif kind == "tool_call_started" and event.call_id:
            item = self._calls[event.call_id] = self._call_item(event)
            outs.append(self._added(item))
        elif kind == "approval_requested" and event.call_id:
            outs += self._asked(event.call_id, event.tool or "", event.args or {})
            self.asking = slot
        elif kind == "tool_call_finished" and event.call_id:
            finished = self._calls.pop(event.call_id, None)
            if finished is None:  # started before this response (one that goes on after its approval)
                finished = self._call_item(event)
                outs.append(self._added(finished))
            failed = event.outcome not in (None, "success")
            finished.update(
                status="failed" if failed else "completed",
                output=event.text,
                error=event.text if failed else None,
            )
            outs.append(self._item_done(finished))
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
        has_item, has_part, has = self._client_has(step, slot)
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
            added = self._added(item)
            if not has_item:
                outs.append((slot + OPEN_ITEM, *added[1:]))
            part = {"type": "output_text", "text": "", "annotations": [], "logprobs": []}
            item["content"].append(part)
            if not has_part:
                outs.append(
                    (
                        slot + OPEN_PART,
                        "response.content_part.added",
                        {**self._where(item), "content_index": 0, "part": dict(part)},
                    )
                )
        item["content"][0]["text"] += chunk
        self._sent[step] = end
        new = chunk[max(0, len(chunk) - (end - has)) :] if has else chunk
        if end > has:
            outs.append(
                (
                    slot + TEXT + end,
                    "response.output_text.delta",
                    {**self._where(item), "content_index": 0, "delta": new, "logprobs": []},
                )
            )
        return outs

    def _client_has(self, step: int, slot: int) -> tuple[bool, bool, int]:
        """What a resuming client has of `step`'s message: its item, its content part, and how much
        of its text. Its position (`after`) says how far into the text of the step then running it
        got, whatever durable events came since: positions are the step's, not the slot's."""
        have_slot, sub = divmod(self.after, SLOT)
        if self.after < 0 or sub < OPEN_ITEM:
            return False, False, 0
        if self._client_step is None and slot >= have_slot * SLOT:
            running = step not in self._ended and step <= self._answered + 1
            self._client_step = step if running else -1
        if step != self._client_step:
            return False, False, 0
        return True, sub >= OPEN_PART, max(0, sub - TEXT)

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

    @staticmethod
    def _call_item(event: Event) -> dict[str, Any]:
        return {
            "type": "mcp_call",
            "id": f"mcp_{event.call_id}",
            "server_label": "wolf",
            "name": event.tool or "",
            "arguments": json.dumps(event.args or {}),
            "output": None,
            "error": None,
            "status": "in_progress",
        }

    def _asked(self, call_id: str, tool: str, args: dict[str, Any]) -> list[Out]:
        """An `mcp_approval_request` item (the Responses API's own): answered by an
        `mcp_approval_response` input item of a response that names this one as previous."""
        item_id = f"mcpr_{call_id}"
        if any(i["id"] == item_id for i in self.items):
            return []
        item = {
            "type": "mcp_approval_request",
            "id": item_id,
            "server_label": "wolf",
            "name": tool,
            "arguments": json.dumps(args),
        }
        return [self._added(item), self._item_done(item)]

    def waiting(self, pending: list[PendingApproval]) -> list[Out]:
        """End the response where its turn waits for approval: a request for each call that waits
        (calls of one step ask together), status incomplete (`approval_required`)."""
        outs: list[Out] = []
        for approval in pending:
            outs += self._asked(approval.call_id, approval.tool, approval.args)
        for step in sorted(self._open):
            outs += self._end_text(step, "", "completed")
        self.status, self.incomplete, self.done = "incomplete", "approval_required", True
        outs.append((0, "response.incomplete", {"response": self.body()}))
        slot = self.asking or 0
        return self._filter([(slot + 2 + i, t, body) for i, (_, t, body) in enumerate(outs)])

    def waiting_calls(self) -> list[dict[str, Any]]:
        """The approval requests this response ended with."""
        return [i for i in self.items if i["type"] == "mcp_approval_request"]

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

    def _filter(self, outs: list[Out]) -> list[Out]:
        """Drop what the client has (`after`; text it has of a step is dropped in `_text`)."""
        return [out for out in outs if out[0] > self.after]

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
            "incomplete_details": {
                "reason": self.incomplete
                or ("interrupted" if self.status == "cancelled" else "limit_reached")
            }
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


async def read_to_end(wolf: WolfClient, view: TurnView) -> TurnView:
    """Read the turn's durable events until it ends, or waits for approval."""
    async for offset, event in wolf.events(view.rid.session, view.rid.base, live=False):
        view.feed(offset, event)
        if view.asking is not None and not view.done:
            view.waiting(await _pending(wolf, view))
        if view.done:
            break
    await _whole_answer(wolf, view)
    return view


async def _pending(wolf: WolfClient, view: TurnView) -> list[PendingApproval]:
    """The calls of the response's turn that wait for approval now."""
    status = await wolf.status(view.rid.session)
    return status.pending_approvals if status.turn_id == view.rid.turn_id else []


async def answered(request: Request, work: Awaitable[T], limit: float = WAIT_LIMIT) -> T:
    """`work` (a non-streamed request's wait for its turn), given up when the client disconnects
    (uvicorn does not cancel a handler then: it would follow the session for nobody) or after `limit`
    seconds (TimeoutError): a non-streamed request never hangs."""
    task = asyncio.ensure_future(work)
    gone = asyncio.ensure_future(_disconnect(request))
    try:
        done, _ = await asyncio.wait({task, gone}, timeout=limit, return_when=asyncio.FIRST_COMPLETED)
        if task in done:
            return task.result()
        if gone in done:
            raise ClientGone
        raise TimeoutError
    finally:
        for pending in (task, gone):
            pending.cancel()
        await asyncio.gather(task, gone, return_exceptions=True)


class ClientGone(Exception):
    """The client of a non-streamed request disconnected before its answer."""


async def _disconnect(request: Request) -> None:
    while (await request.receive())["type"] != "http.disconnect":
        pass


async def snapshot(wolf: WolfClient, view: TurnView) -> TurnView:
    """What the turn's durable events say now (it may still run)."""
    end = await wolf.event_offset(view.rid.session)
    if end > view.rid.base:
        async for offset, event in wolf.events(view.rid.session, view.rid.base, live=False):
            view.feed(offset, event)
            if view.done or view.asking is not None or offset >= end - 1:
                break
        if view.asking is not None and not view.done:
            view.waiting(await _pending(wolf, view))
    if not view.done and view.status == "queued":
        status = await wolf.status(view.rid.session)
        if status.state == "done":
            view.status, view.error = "cancelled", {"code": "session_closed", "message": "the session closed"}
    await _whole_answer(wolf, view)
    return view


async def follow(wolf: WolfClient, view: TurnView) -> AsyncIterator[Out]:
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
                outs = view.feed(offset, event)
                if view.asking is not None and not view.done:
                    outs += view.waiting(await _pending(wolf, view))
                for out in outs:
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


def sse(outs: AsyncIterator[dict[str, Any]], headers: dict[str, str]) -> EventSourceResponse:
    return EventSourceResponse(
        outs,
        ping=HEARTBEAT,
        ping_message_factory=_Heartbeat,
        headers={"Cache-Control": "no-cache", **headers},
        sep="\n",
    )


def starting_after(request: Request) -> int:
    value = request.query_params.get("starting_after") or request.headers.get("last-event-id") or "-1"
    try:
        return int(value)
    except ValueError:
        raise ApiError(400, "starting_after must be a sequence number", code="invalid_value") from None
