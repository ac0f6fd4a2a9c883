"""The data converter every AgentWolf client and worker uses: pydantic JSON, with payloads over a
threshold (huge tool outputs, prompts, transcripts) moved to external storage through Temporal's
own `ExternalStorage`, so history keeps a small reference and no payload nears the 2 MB limit.

`WOLF_PAYLOAD_STORE` says where those payloads go; clients and workers of one deployment must
share it:
- a directory (the default, `$WOLF_HOME/payloads`): content-addressed files (`FilesystemDriver`),
  what the embedded stack uses; `wolf payloads gc` removes old ones no running workflow references;
- `s3://BUCKET[/PREFIX]`: temporalio's `S3StorageDriver` on an aioboto3 client (extra `s3`),
  configured like every AWS tool (`AWS_ENDPOINT_URL_S3` or `AWS_ENDPOINT_URL`, `AWS_REGION`,
  `AWS_PROFILE`, credentials, `~/.aws/config`);
- `gs://BUCKET[/PREFIX]`: temporalio's `GCSStorageDriver` on a gcloud-aio-storage client (extra
  `gcs`), configured by Application Default Credentials (`GOOGLE_APPLICATION_CREDENTIALS`) and
  `STORAGE_EMULATOR_HOST`.

Object keys are temporalio's (`v0/ns/<namespace>/wt/<type>/wi/<workflow id>/.../d/sha256/<digest>`)
under `PREFIX/`; a claim in history names the whole key, so a reader finds it whatever prefix it is
configured with, and temporalio's plain drivers of the same name can read it too.

`data_converter()` is synchronous (clients, workers and the CLI build it before any event loop
runs), while the object stores' clients are aiohttp-based and belong to one loop: each driver opens
its client on first use in a loop and closes it when that loop shuts down (the end of
`asyncio.run`, or of pytest's runner), or earlier with `await close_storage(converter)`.
"""

from __future__ import annotations

import asyncio
import dataclasses
import hashlib
import os
import re
import tempfile
from collections.abc import AsyncGenerator, Awaitable, Callable, Mapping, Sequence
from contextlib import AsyncExitStack
from pathlib import Path
from typing import Any, Generic, TypeVar

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
STORE_ENV = "WOLF_PAYLOAD_STORE"

T = TypeVar("T")


class PayloadStoreError(ValueError):
    """`WOLF_PAYLOAD_STORE` names a store this installation cannot use (bad form, missing extra)."""


class PayloadIntegrityError(ValueError):
    """A claim that does not name a payload of this store, or a stored file that does not match its
    digest: history and the store's folder are both outside this process's control, so neither is
    trusted."""


DIGEST = re.compile(r"[0-9a-f]{64}")
"""A payload's name in the filesystem store: the sha256 of its bytes, lowercase hex."""
TEMP = re.compile(r"\.[0-9a-f]{64}\.[^.]+\.tmp")
"""A payload being written, or left by a writer that died: `.<digest>.<random>.tmp` beside it."""


class FilesystemDriver(StorageDriver):
    """Content-addressed files, `root/<first two hex>/<sha256>`: storing the same payload twice (an
    activity retry) is one file. Claims are digests only, never paths; every read is checked against
    its digest; files are 0600 and folders 0700, since payloads carry prompts and tool output."""

    def __init__(self, root: Path) -> None:
        self.root = root

    def name(self) -> str:
        return "wolf-fs"

    async def store(
        self, context: StorageDriverStoreContext, payloads: Sequence[Payload]
    ) -> list[StorageDriverClaim]:
        return await asyncio.to_thread(lambda: [self._write(p.SerializeToString()) for p in payloads])

    async def retrieve(
        self, context: StorageDriverRetrieveContext, claims: Sequence[StorageDriverClaim]
    ) -> list[Payload]:
        return await asyncio.to_thread(lambda: [self._read(c.claim_data) for c in claims])

    def _path(self, digest: str) -> Path:
        return self.root / digest[:2] / digest

    def _write(self, data: bytes) -> StorageDriverClaim:
        digest = hashlib.sha256(data).hexdigest()
        path = self._path(digest)
        try:
            os.utime(path)  # already stored: a fresh mtime tells `wolf payloads gc` it is in use again
        except FileNotFoundError:
            for folder in (self.root, path.parent):
                folder.mkdir(mode=0o700, parents=True, exist_ok=True)
                folder.chmod(0o700)  # also one an older version made 0755
            fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{digest}.", suffix=".tmp")  # 0600, see TEMP
            try:
                with os.fdopen(fd, "wb") as file:
                    file.write(data)
                os.replace(tmp, path)  # atomic: readers never see half a payload; same-payload writers agree
            except BaseException:
                Path(tmp).unlink(missing_ok=True)
                raise
        return StorageDriverClaim({"sha256": digest})

    def _read(self, claim: Mapping[str, str]) -> Payload:
        digest = claim.get("sha256")
        if not isinstance(digest, str) or not DIGEST.fullmatch(digest):
            raise PayloadIntegrityError(
                f"payload claim {dict(claim)!r} refused: a {self.name()} claim is a lowercase sha256 hex "
                "digest"
            )
        data = self._path(digest).read_bytes()
        if hashlib.sha256(data).hexdigest() != digest:
            raise PayloadIntegrityError(
                f"stored payload {digest} is corrupt or tampered: its content does not match its sha256 "
                f"({self._path(digest)})"
            )
        payload = Payload()
        payload.ParseFromString(data)
        return payload


# -- object stores ----------------------------------------------------------------------------------


class PerLoop(Generic[T]):
    """An async client opened on first use in each event loop and closed when that loop shuts down.

    `opener(stack)` opens the client, registering its cleanup on `stack`. The closing rides on an
    async generator the loop knows about: `asyncio.run` and `asyncio.Runner` finalize those inside
    the loop when they end, so the client is closed there even if nobody calls `aclose()`. A failed
    open is retried by the next use.
    """

    def __init__(self, opener: Callable[[AsyncExitStack], Awaitable[T]]) -> None:
        self._open = opener
        self._opened: dict[asyncio.AbstractEventLoop, asyncio.Task[tuple[T, AsyncGenerator[None, None]]]] = {}

    async def get(self) -> T:
        loop = asyncio.get_running_loop()
        task = self._opened.get(loop)
        if task is None or (task.done() and (task.cancelled() or task.exception() is not None)):
            task = self._opened[loop] = loop.create_task(self._start(loop))
        client, _ = await asyncio.shield(task)  # a caller cancelled meanwhile leaves the open to finish
        return client

    def is_open(self) -> bool:
        """Whether this loop holds an open client."""
        task = self._opened.get(asyncio.get_running_loop())
        return task is not None and task.done() and not task.cancelled() and task.exception() is None

    async def aclose(self) -> None:
        """Close this loop's client now (the next use opens a new one)."""
        loop = asyncio.get_running_loop()
        task = self._opened.get(loop)
        if task is None:
            return
        try:
            _, closer = await asyncio.shield(task)
        except Exception:  # noqa: BLE001 - it never opened: nothing to close
            if self._opened.get(loop) is task:
                del self._opened[loop]
            return
        await closer.aclose()

    async def _start(self, loop: asyncio.AbstractEventLoop) -> tuple[T, AsyncGenerator[None, None]]:
        me = asyncio.current_task()
        stack = AsyncExitStack()
        try:
            client = await self._open(stack)
        except BaseException:
            await stack.aclose()
            raise
        closer = self._closing(loop, me, stack)
        await anext(closer)  # first iteration registers it with the loop's shutdown_asyncgens
        return client, closer

    async def _closing(
        self, loop: asyncio.AbstractEventLoop, task: asyncio.Task[Any] | None, stack: AsyncExitStack
    ) -> AsyncGenerator[None, None]:
        try:
            yield
        finally:
            if self._opened.get(loop) is task:
                del self._opened[loop]
            await stack.aclose()


class _UnderPrefix:
    """Object names as one of temporalio's object-store drivers makes them, with `prefix/` before."""

    def __init__(self, prefix: str) -> None:
        self.prefix = prefix

    def __call__(self, name: str) -> str:
        return f"{self.prefix}/{name}" if self.prefix else name


class ObjectStoreDriver(StorageDriver):
    """temporalio's S3 or GCS driver storing under `bucket/prefix/`, on a client opened per loop.

    `writer` is the temporalio driver whose client puts the prefix before every object name; the
    claims it returns are rewritten to name the whole object, which `reader` (the same driver on the
    unprefixed client) retrieves. The driver's name and claim layout stay temporalio's own.
    """

    def __init__(
        self,
        location: str,
        bucket: str,
        prefix: str,
        writer: StorageDriver,
        reader: StorageDriver,
        name_field: str,
        clients: PerLoop[Any],
    ) -> None:
        self.location, self.bucket, self.prefix = location, bucket, prefix
        self.writer, self.reader, self.name_field, self.clients = writer, reader, name_field, clients

    def name(self) -> str:
        return self.writer.name()

    def type(self) -> str:
        return self.writer.type()

    async def store(
        self, context: StorageDriverStoreContext, payloads: Sequence[Payload]
    ) -> list[StorageDriverClaim]:
        claims = await self.writer.store(context, payloads)
        full = _UnderPrefix(self.prefix)
        return [
            StorageDriverClaim({**c.claim_data, self.name_field: full(c.claim_data[self.name_field])})
            for c in claims
        ]

    async def retrieve(
        self, context: StorageDriverRetrieveContext, claims: Sequence[StorageDriverClaim]
    ) -> list[Payload]:
        return await self.reader.retrieve(context, claims)

    async def aclose(self) -> None:
        await self.clients.aclose()


def _needs(extra: str, location: str, exc: ImportError) -> PayloadStoreError:
    return PayloadStoreError(
        f"payload store {location!r} ({STORE_ENV}) needs AgentWolf's {extra!r} extra "
        f"(pip install 'agentwolf[{extra}]'); missing: {exc.name or exc}"
    )


def _s3_driver(location: str, bucket: str, prefix: str) -> ObjectStoreDriver:
    try:
        import aioboto3
        import types_aiobotocore_s3  # noqa: F401 - temporalio's aioboto3 adapter imports it at run time
        from temporalio.contrib.aws.s3driver import S3StorageDriver, S3StorageDriverClient
        from temporalio.contrib.aws.s3driver.aioboto3 import new_aioboto3_client
    except ImportError as exc:
        raise _needs("s3", location, exc) from exc

    where: dict[str, str] = {}

    async def open_client(stack: AsyncExitStack) -> S3StorageDriverClient:
        # botocore reads the endpoint (AWS_ENDPOINT_URL_S3, AWS_ENDPOINT_URL, the profile's
        # endpoint_url), region, credentials and addressing style as every AWS tool does.
        raw = await stack.enter_async_context(aioboto3.Session().client("s3"))
        where.update(endpoint=raw.meta.endpoint_url, region=raw.meta.region_name or "none")
        return new_aioboto3_client(raw)

    clients: PerLoop[S3StorageDriverClient] = PerLoop(open_client)

    class Objects(S3StorageDriverClient):
        def __init__(self, full: _UnderPrefix) -> None:
            self.full = full

        async def put_object(self, *, bucket: str, key: str, data: bytes) -> None:
            await (await clients.get()).put_object(bucket=bucket, key=self.full(key), data=data)

        async def object_exists(self, *, bucket: str, key: str) -> bool:
            return await (await clients.get()).object_exists(bucket=bucket, key=self.full(key))

        async def get_object(self, *, bucket: str, key: str) -> bytes:
            return await (await clients.get()).get_object(bucket=bucket, key=self.full(key))

        def describe(self) -> Mapping[str, str]:
            return {"store": location, **where}

    writer = S3StorageDriver(client=Objects(_UnderPrefix(prefix)), bucket=bucket)
    reader = S3StorageDriver(client=Objects(_UnderPrefix("")), bucket=bucket)
    return ObjectStoreDriver(location, bucket, prefix, writer, reader, "key", clients)


def _gcs_driver(location: str, bucket: str, prefix: str) -> ObjectStoreDriver:
    try:
        from gcloud.aio.storage import Storage
        from temporalio.contrib.gcp.gcsdriver import GCSStorageDriver, GCSStorageDriverClient
        from temporalio.contrib.gcp.gcsdriver.gcloud_aio import new_gcloud_aio_client
    except ImportError as exc:
        raise _needs("gcs", location, exc) from exc

    async def open_client(stack: AsyncExitStack) -> GCSStorageDriverClient:
        # Credentials: Application Default Credentials; STORAGE_EMULATOR_HOST points it elsewhere.
        return new_gcloud_aio_client(await stack.enter_async_context(Storage()))

    clients: PerLoop[GCSStorageDriverClient] = PerLoop(open_client)

    class Objects(GCSStorageDriverClient):
        def __init__(self, full: _UnderPrefix) -> None:
            self.full = full

        async def put_object(self, *, bucket: str, object_name: str, data: bytes) -> None:
            await (await clients.get()).put_object(
                bucket=bucket, object_name=self.full(object_name), data=data
            )

        async def object_exists(self, *, bucket: str, object_name: str) -> bool:
            return await (await clients.get()).object_exists(
                bucket=bucket, object_name=self.full(object_name)
            )

        async def get_object(self, *, bucket: str, object_name: str) -> bytes:
            return await (await clients.get()).get_object(bucket=bucket, object_name=self.full(object_name))

        def describe(self) -> Mapping[str, str]:
            return {"store": location}

    writer = GCSStorageDriver(client=Objects(_UnderPrefix(prefix)), bucket=bucket)
    reader = GCSStorageDriver(client=Objects(_UnderPrefix("")), bucket=bucket)
    return ObjectStoreDriver(location, bucket, prefix, writer, reader, "object_name", clients)


_OBJECT_STORES = {"s3": _s3_driver, "gs": _gcs_driver}


def store_location(location: str | None = None) -> str:
    """`location`, else `WOLF_PAYLOAD_STORE`, else `$WOLF_HOME/payloads`."""
    return location or os.environ.get(STORE_ENV) or str(data_dir() / "payloads")


def filesystem_root(location: str | None = None) -> Path | None:
    """The folder of a filesystem store (a path or `file://PATH`); None for any other scheme."""
    location = store_location(location)
    scheme, sep, rest = location.partition("://")
    if not sep:
        return Path(location)
    return Path(rest) if scheme == "file" else None


def storage_driver(location: str | None = None) -> StorageDriver:
    """The driver for `location` (else `WOLF_PAYLOAD_STORE`, else `$WOLF_HOME/payloads`)."""
    location = store_location(location)
    root = filesystem_root(location)
    if root is not None:
        return FilesystemDriver(root)
    scheme, _, rest = location.partition("://")
    make = _OBJECT_STORES.get(scheme.lower())
    if make is None:
        raise PayloadStoreError(
            f"payload store {location!r} ({STORE_ENV}): unknown scheme {scheme!r}; "
            "use a directory, s3://BUCKET/PREFIX or gs://BUCKET/PREFIX (the prefix is optional)"
        )
    bucket, _, prefix = rest.partition("/")
    if not bucket:
        raise PayloadStoreError(
            f"payload store {location!r} ({STORE_ENV}): no bucket; use {scheme}://BUCKET/PREFIX"
        )
    return make(location, bucket, prefix.strip("/"))


def data_converter(location: str | None = None, threshold: int = THRESHOLD) -> DataConverter:
    storage = ExternalStorage(drivers=[storage_driver(location)], payload_size_threshold=threshold)
    return dataclasses.replace(pydantic_data_converter, external_storage=storage)


def storing_all(converter: DataConverter) -> DataConverter | None:
    """`converter` putting every payload it encodes in the store, whatever its size (archived
    transcript parts, workspace snapshots); None when it has no store."""
    storage = converter.external_storage
    if storage is None:
        return None
    return dataclasses.replace(
        converter, external_storage=dataclasses.replace(storage, payload_size_threshold=0)
    )


async def close_storage(converter: DataConverter) -> None:
    """Close the object-store clients this loop opened for `converter` (the filesystem has none).

    Optional: they close by themselves when the loop shuts down."""
    storage = converter.external_storage
    for driver in storage.drivers if storage else ():
        if isinstance(driver, ObjectStoreDriver):
            await driver.aclose()
