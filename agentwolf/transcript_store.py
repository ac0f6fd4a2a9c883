"""Archived transcript parts in the payload store (workflows/archive.py): written by the
`wolf.archive_transcript` activity, read back by whoever reads a whole transcript (clients, forks,
evals, `recall` of an archived result).

Through the data converter's own external storage (payloads.py), with no size threshold: the store,
its drivers, its integrity checks and `wolf payloads gc` are the ones every large payload uses.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Awaitable, Callable, Sequence
from typing import Any

from pydantic_ai.messages import ModelMessage
from temporalio.api.common.v1 import Payload
from temporalio.client import WorkflowQueryFailedError
from temporalio.converter import DataConverter

from agentwolf.workflows.archive import ArchivedPart, StoredRef, TranscriptArchive, TranscriptTail
from agentwolf.workflows.contracts import (
    EMPTY_DIGEST,
    TRANSCRIPT_QUERY,
    TRANSCRIPT_TAIL_QUERY,
    chain_digest,
)


class ArchiveError(ValueError):
    """An archived part that cannot be read back, or does not match the archive's digest."""


async def store(converter: DataConverter, messages: Sequence[ModelMessage]) -> StoredRef | None:
    """`messages` as one stored payload; None when the converter has no payload store."""
    storage = converter.external_storage
    if storage is None:
        return None
    always = dataclasses.replace(
        converter, external_storage=dataclasses.replace(storage, payload_size_threshold=0)
    )
    [reference] = await always.encode([list(messages)])
    return StoredRef(
        metadata={k: v.decode() for k, v in reference.metadata.items()}, data=reference.data.decode()
    )


async def load(converter: DataConverter, part: ArchivedPart) -> list[ModelMessage]:
    payload = Payload(
        metadata={k: v.encode() for k, v in part.ref.metadata.items()}, data=part.ref.data.encode()
    )
    try:
        [messages] = await converter.decode([payload], [list[ModelMessage]])
    except Exception as exc:  # noqa: BLE001 - any failure to read it back is the same for the reader
        raise ArchiveError(
            f"archived messages {part.start}-{part.end} could not be read back: {exc}"
        ) from exc
    if len(messages) != part.end - part.start:
        raise ArchiveError(
            f"archived messages {part.start}-{part.end}: the store holds {len(messages)} messages there"
        )
    return messages


async def whole(converter: DataConverter, tail: TranscriptTail) -> list[ModelMessage]:
    """The whole transcript: the archived parts read back (checked against the archive's digest),
    then the tail."""
    archived: list[ModelMessage] = []
    for part in tail.archive.parts:
        archived += await load(converter, part)
    if chain_digest(EMPTY_DIGEST, archived) != tail.archive.digest:
        raise ArchiveError("the archived messages read back do not match the session's digest of them")
    return archived + tail.messages


async def held(query: Callable[..., Awaitable[Any]]) -> TranscriptTail:
    """The transcript as a session holds it, by `query(name, result_type=...)` (a handle's query): the
    tail query, else (a session on a worker from before archives) the plain one, with no archive."""
    try:
        tail: TranscriptTail = await query(TRANSCRIPT_TAIL_QUERY, result_type=TranscriptTail)
    except WorkflowQueryFailedError as err:
        if TRANSCRIPT_TAIL_QUERY not in str(err):
            raise
        messages: list[ModelMessage] = await query(TRANSCRIPT_QUERY, result_type=list[ModelMessage])
        return TranscriptTail(archive=TranscriptArchive(), messages=messages)
    return tail


async def read_transcript(
    query: Callable[..., Awaitable[Any]], converter: DataConverter
) -> list[ModelMessage]:
    """A session's whole transcript (`held`, its archived parts read back)."""
    tail = await held(query)
    return await whole(converter, tail) if tail.archive.parts else tail.messages
