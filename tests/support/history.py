"""Reading recorded histories in tests."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

from google.protobuf.message import Message
from temporalio.api.common.v1 import Payload

REFERENCE_TYPE = b"temporal.api.sdk.v1.ExternalStorageReference"


def payloads(history: Any) -> Iterator[Payload]:
    """Every payload any event of `history` carries (walks every protobuf field)."""

    def walk(message: Message) -> Iterator[Payload]:
        if isinstance(message, Payload):
            yield message
            return
        for field, value in message.ListFields():
            if field.message_type is None:
                continue
            if isinstance(value, Message):
                yield from walk(value)
            else:  # a repeated field or a map of messages
                for item in value.values() if hasattr(value, "values") else value:
                    yield from walk(item)

    for event in history.events:
        yield from walk(event)


def references(history: Any) -> list[dict[str, Any]]:
    """The external-storage references among the history's payloads (their JSON)."""
    return [json.loads(p.data) for p in payloads(history) if p.metadata.get("messageType") == REFERENCE_TYPE]
