"""The data converter every AgentWolf client and worker uses: pydantic JSON, with payloads over a
threshold (huge tool outputs, prompts, transcripts) moved to external storage through Temporal's
own `ExternalStorage`, so history keeps a small reference and no payload nears the 2 MB limit.

The store is the directory `WOLF_PAYLOAD_STORE` (default `$WOLF_HOME/payloads`), which clients and
workers of one deployment must share (the embedded stack does). Object-store drivers (temporalio's
S3 and GCS drivers) are not wired in yet.
"""

from __future__ import annotations

import asyncio
import dataclasses
import hashlib
import os
from collections.abc import Sequence
from pathlib import Path

from temporalio.api.common.v1 import Payload
from temporalio.contrib.pydantic import pydantic_data_converter
from temporalio.converter import (
    DataConverter,
    ExternalStorage,
    StorageDriver,
    StorageDriverClaim,
    StorageDriverRetrieveContext,
    StorageDriverStoreContext,
)

from agentwolf.paths import data_dir

THRESHOLD = 256 * 1024


class FilesystemDriver(StorageDriver):
    """Content-addressed files: storing the same payload twice (an activity retry) is one file."""

    def __init__(self, root: Path) -> None:
        self.root = root

    def name(self) -> str:
        return "wolf-fs"

    async def store(self, context: StorageDriverStoreContext, payloads: Sequence[Payload]) -> list[StorageDriverClaim]:
        return await asyncio.to_thread(lambda: [self._write(p.SerializeToString()) for p in payloads])

    async def retrieve(
        self, context: StorageDriverRetrieveContext, claims: Sequence[StorageDriverClaim]
    ) -> list[Payload]:
        return await asyncio.to_thread(lambda: [self._read(c.claim_data["sha256"]) for c in claims])

    def _path(self, digest: str) -> Path:
        return self.root / digest[:2] / digest

    def _write(self, data: bytes) -> StorageDriverClaim:
        digest = hashlib.sha256(data).hexdigest()
        path = self._path(digest)
        if not path.exists():
            path.parent.mkdir(parents=True, exist_ok=True)
            tmp = path.with_suffix(f".{os.getpid()}.tmp")
            tmp.write_bytes(data)
            tmp.replace(path)  # atomic: readers never see half a payload
        return StorageDriverClaim({"sha256": digest})

    def _read(self, digest: str) -> Payload:
        payload = Payload()
        payload.ParseFromString(self._path(digest).read_bytes())
        return payload


def data_converter(location: str | None = None, threshold: int = THRESHOLD) -> DataConverter:
    root = Path(location or os.environ.get("WOLF_PAYLOAD_STORE") or data_dir() / "payloads")
    storage = ExternalStorage(drivers=[FilesystemDriver(root)], payload_size_threshold=threshold)
    return dataclasses.replace(pydantic_data_converter, external_storage=storage)
