"""Live output from running activities: streamed model text and tool progress, as heartbeat details.

RFC-0050's tiered consistency: deltas are ephemeral, turn-level events are durable. A running
activity's heartbeat details are the ephemeral channel Temporal already has: each heartbeat replaces
the last, the server keeps only the newest on the pending activity, and none of it enters history.
Followers read them with `describe` (agentwolf/client/live.py). The details are cumulative (the
text so far, within a window), so a follower that polls late or reconnects loses nothing, and a
retried attempt announces itself by its attempt number.
"""

from __future__ import annotations

import time
from collections.abc import Callable

from mcp.shared.dispatcher import ProgressFnT
from pydantic_ai.direct import model_request as direct_model_request
from pydantic_ai.direct import model_request_stream
from pydantic_ai.messages import ModelMessage, ModelResponse, ThinkingPart
from pydantic_ai.models import Model, ModelRequestParameters
from pydantic_ai.models.function import FunctionModel
from pydantic_ai.settings import ModelSettings
from temporalio import activity

from agentwolf.config.policy import Secrets
from agentwolf.hosts.quotas import Wait
from agentwolf.telemetry import tracing
from agentwolf.workflows.contracts import LiveText, LiveTool

WINDOW = 128 * 1024
"""Characters of text (and of thinking) a heartbeat carries: the tail past this is what a follower
that fell that far behind has missed (the step's durable text still has all of it)."""

BEAT_EVERY = 0.05
"""Seconds between heartbeats a streaming model request sends on its own (half the worker's throttle:
a chunk after a quiet spell leaves at once)."""

PROGRESS_EVERY = 0.1
"""Seconds between progress heartbeats a tool call sends (MCP servers may report far faster)."""


class LiveResponse:
    """The heartbeat details of one streaming model request, updated as parts arrive."""

    def __init__(self, turn_id: str, step: int, secrets: Secrets) -> None:
        self.secrets = secrets
        self.details = LiveText(turn_id=turn_id, step=step, attempt=activity.info().attempt)
        self._partial: Callable[[], ModelResponse] | None = None
        self._sent_at = 0.0

    def update(self, partial: Callable[[], ModelResponse]) -> None:
        """Called per chunk with the stream's response so far (built only when sent); heartbeats
        at most every BEAT_EVERY: each one encodes the whole text so far, and the SDK would send
        only the newest anyway. The periodic heartbeat (`current()`) sends the rest."""
        self._partial = partial
        if time.monotonic() - self._sent_at >= BEAT_EVERY:
            activity.heartbeat(self.current())

    def current(self) -> LiveText:
        """The details for the text so far."""
        if self._partial is not None:
            partial, self._partial = self._partial(), None
            thinking = "\n\n".join(
                p.content for p in partial.parts if isinstance(p, ThinkingPart) and p.content
            )
            self.details = self.details.model_copy(
                update=dict(zip(("text_start", "text"), self._window(partial.text or ""), strict=True))
                | dict(zip(("thinking_start", "thinking"), self._window(thinking), strict=True))
            )
        self._sent_at = time.monotonic()
        return self.details

    def _window(self, text: str) -> tuple[int, str]:
        """Redacted, without a tail that could be the start of a secret (the next heartbeat, with
        the secret whole, masks it), and cut to the window."""
        text = self.secrets.redact(text)
        text = text[: len(text) - _secret_prefix_len(text, self.secrets.values)]
        start = max(0, len(text) - WINDOW)
        return start, text[start:]


def _secret_prefix_len(text: str, secrets: set[str]) -> int:
    """The length of the longest tail of `text` that a secret starts with."""
    longest = 0
    for secret in secrets:
        for n in range(min(len(secret) - 1, len(text)), longest, -1):
            if text.endswith(secret[:n]):
                longest = n
                break
    return longest


def streams(model: Model) -> bool:
    """Whether `model` can stream (a FunctionModel can only with a stream function)."""
    return not isinstance(model, FunctionModel) or model.stream_function is not None


async def request(
    model: Model,
    messages: list[ModelMessage],
    settings: ModelSettings,
    parameters: ModelRequestParameters,
    live: LiveResponse | None,
) -> ModelResponse:
    """One model request; streamed into `live` when given and the model can stream. Traced as
    pydantic-ai instruments a request when tracing is on."""
    instrument = tracing.model_instrumentation()
    if live is None or not streams(model):
        return await direct_model_request(
            model,
            messages,
            model_settings=settings,
            model_request_parameters=parameters,
            instrument=instrument,
        )
    try:
        async with model_request_stream(
            model,
            messages,
            model_settings=settings,
            model_request_parameters=parameters,
            instrument=instrument,
        ) as stream:
            async for _ in stream:
                live.update(stream.get)
            return stream.get()
    except NotImplementedError:  # a provider without streaming: whole responses, no error
        return await direct_model_request(
            model,
            messages,
            model_settings=settings,
            model_request_parameters=parameters,
            instrument=instrument,
        )


def details(turn_id: str, step: int, live: LiveResponse | None, wait: Wait | None) -> tuple[LiveText, ...]:
    """A model request's heartbeat details: its text so far, and what it waits for while it waits."""
    if live is None and wait is None:
        return ()
    current = (
        live.current() if live else LiveText(turn_id=turn_id, step=step, attempt=activity.info().attempt)
    )
    if wait is None:
        return (current,)
    return (
        current.model_copy(update={"waiting": f"rate_limited: {wait.reason}", "resumes_at": wait.resumes_at}),
    )


def tool_progress(
    call_id: str, tool: str, secrets: Secrets
) -> tuple[ProgressFnT, Callable[[], tuple[LiveTool, ...]]]:
    """An MCP progress callback for one tool call, and the heartbeat details it leaves (none until
    the server reports progress). Heartbeats are rate-limited to one per PROGRESS_EVERY; messages
    are redacted like tool output. A report without a message keeps the last one (servers often say
    what they do once per phase and send bare counts between): the newest report is all a follower
    reads, and it would lose the message between them."""
    attempt = activity.info().attempt
    latest: list[LiveTool] = []
    sent_at = 0.0

    async def on_progress(progress: float, total: float | None, message: str | None) -> None:
        nonlocal sent_at
        message = secrets.redact(message) if message else latest[0].message if latest else None
        latest[:] = [
            LiveTool(
                call_id=call_id, tool=tool, attempt=attempt, progress=progress, total=total, message=message
            )
        ]
        if time.monotonic() - sent_at >= PROGRESS_EVERY:
            sent_at = time.monotonic()
            activity.heartbeat(latest[0])

    return on_progress, lambda: tuple(latest)
