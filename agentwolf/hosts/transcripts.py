"""The worker's copies of session transcripts, so a model request carries only what is new, and the
arithmetic that keeps a copy true: a request's prefix and delta (`Prefix.extend`), what the session
archived let go, the cut copy the model was sent, sizes, and the next entry with the answer
(`Working.answered`), checked by length and chained digest like the workflow's own.

One cache for the whole worker, shared by its hosts, bounded by count and by (approximate) bytes: a
count alone let 256 whole transcripts per host, each up to megabytes, grow without bound.
"""

from __future__ import annotations

from collections import OrderedDict
from dataclasses import dataclass, field

from pydantic_ai.messages import ModelMessage, ModelMessagesTypeAdapter

from agentwolf.workflows.archive import let_go
from agentwolf.workflows.compaction import ContextView, Rendered, cut_tool_outputs, stubs_any, working_context
from agentwolf.workflows.contracts import chain_digest


@dataclass
class CachedTranscript:
    messages: list[ModelMessage]
    digest: str
    sent: list[ModelMessage]
    """What the model was sent: `messages` with long tool results cut (the same objects otherwise), kept
    so that each request cuts only what is new."""
    size: int = 0
    """About how many bytes it holds (its JSON's length)."""
    rendered: Rendered = field(default_factory=Rendered)
    """The working context's stubs and fold lines built so far (small: stubs, not results)."""


@dataclass
class Prefix:
    """A session's first messages for one request, as this worker holds them (a cache hit) or as
    fetched from the session."""

    messages: list[ModelMessage]
    sent: list[ModelMessage]
    size: int
    cache_hit: bool
    rendered: Rendered
    digest: str

    def extend(self, delta: list[ModelMessage], view: ContextView | None, limit: int) -> Working:
        """The request's transcript: what the session archived let go (the cached copy too), then
        the delta appended, cut for the model past `limit` characters per tool result."""
        size = self.size
        if view is not None:
            size -= transcript_size(let_go(self.messages, self.sent, self.rendered, view))
        messages = [*self.messages, *delta]
        sent = [*self.sent, *cut_tool_outputs(delta, limit, start=len(self.messages))]
        return Working(
            messages=messages,
            sent=sent,
            size=size + transcript_size(delta),
            digest=chain_digest(self.digest, delta),
            rendered=self.rendered,
            cut=any(m is not s for m, s in zip(messages, sent, strict=True)),
            stubbed=stubs_any(messages, view),
            context=working_context(messages, view, sent, self.rendered) if view is not None else sent,
        )


@dataclass
class Working:
    """One request's whole transcript on this worker (`Prefix.extend`)."""

    messages: list[ModelMessage]
    sent: list[ModelMessage]
    size: int
    digest: str
    rendered: Rendered
    cut: bool
    """A tool result was cut for the model (`read_tool_output` is offered)."""
    stubbed: bool
    """The working context stubs a result (`recall` is offered)."""
    context: list[ModelMessage]
    """What the model reads: the view's working context, else the cut copy."""

    def answered(self, response: ModelMessage) -> CachedTranscript:
        """The cache entry once `response` (as the workflow holds it) is appended."""
        return CachedTranscript(
            messages=[*self.messages, response],
            digest=chain_digest(self.digest, [response]),
            sent=[*self.sent, response],
            size=self.size + transcript_size([response]),
            rendered=self.rendered,
        )


def transcript_size(messages: list[ModelMessage]) -> int:
    """About how many bytes `messages` hold: their JSON's length (what the cache bounds)."""
    return len(ModelMessagesTypeAdapter.dump_json(messages)) if messages else 0


class TranscriptCache:
    """Transcripts by session (workflow id), least recently used out first past either bound; the
    newest always stays (evicting it would only turn the next request into a refetch)."""

    def __init__(self, max_count: int = 256, max_bytes: int = 256 * 2**20) -> None:
        self.max_count = max_count
        self.max_bytes = max_bytes
        self.bytes = 0
        self._entries: OrderedDict[str, CachedTranscript] = OrderedDict()

    def __len__(self) -> int:
        return len(self._entries)

    def get(self, workflow_id: str) -> CachedTranscript | None:
        cached = self._entries.get(workflow_id)
        if cached is not None:
            self._entries.move_to_end(workflow_id)
        return cached

    def put(self, workflow_id: str, cached: CachedTranscript) -> None:
        self.pop(workflow_id)
        self._entries[workflow_id] = cached
        self.bytes += cached.size
        while len(self._entries) > 1 and (len(self._entries) > self.max_count or self.bytes > self.max_bytes):
            self.bytes -= self._entries.popitem(last=False)[1].size

    def pop(self, workflow_id: str) -> None:
        if (cached := self._entries.pop(workflow_id, None)) is not None:
            self.bytes -= cached.size
