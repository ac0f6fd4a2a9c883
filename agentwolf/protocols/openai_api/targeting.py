"""Request bodies and the sessions they target: a response id names where its turn lives, a request
starts a session or asks one more turn of an existing one."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from temporalio.client import WorkflowUpdateFailedError
from temporalio.service import RPCError

from agentwolf.access import Principal
from agentwolf.client.wolf_client import WolfClient
from agentwolf.memory.namespaces import NamespaceError, check_owner
from agentwolf.protocols.auth import SERVED
from agentwolf.protocols.served import ApiError, Served, Target, not_found
from agentwolf.workflows.turn_settings import TurnSettings

RETRY_AFTER = "2"
SESSION_HEADER = "x-wolf-session"


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


def messages_of(items: Any, where: str) -> list[tuple[str, str]]:
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


INSTRUCTING = ("system", "developer")
"""Roles whose messages are instructions, not conversation."""


def split_instructions(
    messages: list[tuple[str, str]], given: str | None = None
) -> tuple[str | None, list[tuple[str, str]]]:
    """The request's instructions (`given`, then its system and developer messages) and the rest of
    its messages. The instructions are the turn's: added to the agent's own for that turn only
    (TurnSettings.instructions), never stored as something the user said."""
    texts = [given or "", *(text for role, text in messages if role in INSTRUCTING)]
    said = [(role, text) for role, text in messages if role not in INSTRUCTING]
    return "\n\n".join(t for t in texts if t.strip()) or None, said


def prompt_text(messages: list[tuple[str, str]]) -> str:
    """The text a new session's first turn is asked with.

    WolfClient cannot seed a session with a transcript (SessionInput.transcript is the continue-as-new
    snapshot, and a session started with one ignores its first prompt), so the earlier messages of a
    stateless request travel as context at the start of the prompt text (its instructions travel
    apart: `split_instructions`)."""
    *earlier, (_, last) = messages
    if not earlier:
        return last
    lines = ["The conversation so far (you are the assistant):"]
    lines += [f"[{role}] {text}" for role, text in earlier]
    return "\n".join([*lines, "", "The user's message now:", last])


async def resolve_target(served: Served, principal: Principal, model: str) -> Target:
    """`served.resolve`, without reading the registry for an agent of a served manifest file (its
    names have no `/`; registry configs' are `CONFIG/AGENT`): a request's first token waits for this."""
    manifest = served.manifest
    known = manifest is not None and (model in manifest.agents or model in manifest.teams)
    if known and "/" not in model and principal.may_use(SERVED, model):
        return Target(model, model, {"manifest": manifest})
    return await served.resolve(principal, model)


def no_client_tools(body: dict[str, Any]) -> None:
    if body.get("tools"):
        raise ApiError(
            400,
            "client-side tools are not supported: the agent's own tools run on the server",
            code="unsupported_tools",
            param="tools",
        )


def model_of(body: dict[str, Any]) -> str:
    model = body.get("model")
    if not isinstance(model, str) or not model:
        raise ApiError(400, "`model` is required (GET /v1/models lists yours)", code="missing_model")
    return model


def flag(body: dict[str, Any], name: str) -> bool:
    value = body.get(name, False)
    if not isinstance(value, bool) and value is not None:
        raise ApiError(400, f"`{name}` must be true or false", code="invalid_value")
    return bool(value)


# -- starting and continuing turns -----------------------------------------------------------------


async def ask(wolf: WolfClient, session_id: str, text: str, settings: TurnSettings | None) -> ResponseId:
    """One more turn on an existing session (only this text is sent), with its own settings."""
    base = await wolf.event_offset(session_id)
    try:
        turn_id = await wolf.prompt(session_id, text, settings)
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


async def continue_from(
    wolf: WolfClient, named: ResponseId, text: str, settings: TurnSettings | None
) -> ResponseId:
    """The next turn after the named response (OpenAI's `previous_response_id`): on its session when
    that response is its latest turn or has not finished (the new one queues behind it); else (later
    turns followed it, or the session closed) on a fork of the session cut after that turn
    (client/forks.py), so the earlier answer goes on."""
    from agentwolf.workflows.session.cuts import CutError

    status = await wolf.status(named.session)
    running = _turn_number(status.turn_id) if status.turn_id else None
    unfinished = running is not None and named.turn >= running  # it runs, or waits in the queue
    if status.state != "done" and (status.counters.turn_seq <= named.turn or unfinished):
        return await ask(wolf, named.session, text, settings)
    try:
        made = await wolf.fork(named.session, at=str(named.turn))
    except CutError as exc:
        raise ApiError(
            409, f"cannot continue from that response: {exc}", code="previous_response_busy"
        ) from None
    return await ask(wolf, made.session_id, text, settings)


def owner_of(principal: Principal, user: str | None) -> str | None:
    """Whom a new session is for (its owner: whose long-term memory it uses): the key's `subject`;
    else the request's `user` (OpenAI's end-user id) within the key (`key:<its digest's first 12
    hex>:<user>`), so a key without a subject reaches only the users it named itself, never a
    subject's or another key's; else the key itself; without a key (`--no-auth`), `user` as given."""
    if principal.subject:
        return principal.subject
    if user is not None:
        try:
            check_owner(user)
        except NamespaceError as exc:
            raise ApiError(400, str(exc), code="invalid_value", param="user") from None
    key = f"key:{principal.key[:12]}" if principal.key else None
    return ":".join(filter(None, [key, user])) or None


async def start(
    wolf: WolfClient,
    target: Target,
    text: str,
    settings: TurnSettings | None,
    *,
    keep: bool,
    owner: str | None = None,
) -> ResponseId:
    """A new session for `owner` whose first turn is `text` (with its own settings): a background
    task that closes after it unless `keep`."""
    try:
        if keep:
            session_id = await wolf.start_session(
                target.agent, prompt=text, prompt_settings=settings, owner=owner, **target.source
            )
        else:
            session_id = await wolf.submit(
                text, target.agent, prompt_settings=settings, owner=owner, **target.source
            )
    except ValueError as exc:
        raise ApiError(400, str(exc), code="invalid_request") from None
    return ResponseId(session_id, 1, 0)  # a fresh session's first turn, from its first event
