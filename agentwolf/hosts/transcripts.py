"""The worker's copies of session transcripts, so a model request carries only what is new.

One cache for the whole worker, shared by its hosts, bounded by count and by (approximate) bytes: a
count alone let 256 whole transcripts per host, each up to megabytes, grow without bound.
"""

from __future__ import annotations

from collections import OrderedDict
from dataclasses import dataclass, field

from pydantic_ai.messages import ModelMessage

from agentwolf.workflows.compaction import Rendered


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
