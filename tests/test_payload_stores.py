"""Object-store payload drivers: `WOLF_PAYLOAD_STORE=s3://bucket/prefix` end to end on a real S3 HTTP API
(moto's server on 127.0.0.1) and the real Temporal dev server; `gs://` selection, the GCS driver against
its client contract, and the clear errors."""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from contextlib import AsyncExitStack
from pathlib import Path
from types import SimpleNamespace
from typing import ClassVar, Self

import pytest
from pydantic_ai.messages import ToolReturnPart
from temporalio.client import Client

from agentwolf.client.wolf_client import WolfClient
from agentwolf.payloads import (
    FilesystemDriver,
    ObjectStoreDriver,
    PayloadStoreError,
    PerLoop,
    close_storage,
    data_converter,
    storage_driver,
)
from agentwolf.worker.bootstrap import create_worker
from agentwolf.workflows.types import workflow_id
from tests.conftest import make_manifest
from tests.support.history import references
from tests.support.models import Script, text, tool
from tests.test_payloads import _largest_payload

TEN_MB = 10_000_000
BUCKET = "wolf-payloads"
PREFIX = "agentwolf/ci"


@pytest.fixture
def s3(monkeypatch):
    """moto's S3 server on 127.0.0.1 (an ephemeral port) with one bucket; AWS settings from the
    environment only, as a cluster's worker would have them."""
    from moto.server import ThreadedMotoServer

    server = ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
    server.start()
    host, port = server.get_host_and_port()
    endpoint = f"http://{host}:{port}"
    for name, value in {
        "AWS_ENDPOINT_URL_S3": endpoint,
        "AWS_ACCESS_KEY_ID": "testing",
        "AWS_SECRET_ACCESS_KEY": "testing",
        "AWS_REGION": "us-east-1",
        "AWS_CONFIG_FILE": os.devnull,
        "AWS_SHARED_CREDENTIALS_FILE": os.devnull,
        "AWS_EC2_METADATA_DISABLED": "true",
    }.items():
        monkeypatch.setenv(name, value)
    monkeypatch.delenv("AWS_ENDPOINT_URL", raising=False)
    monkeypatch.delenv("AWS_PROFILE", raising=False)
    import boto3

    objects = boto3.client("s3")  # the same environment: this checks what the drivers see
    objects.create_bucket(Bucket=BUCKET)
    try:
        yield SimpleNamespace(endpoint=endpoint, objects=objects)
    finally:
        server.stop()


def _listing(objects, prefix: str = "") -> dict[str, int]:
    pages = objects.get_paginator("list_objects_v2").paginate(Bucket=BUCKET, Prefix=prefix)
    return {o["Key"]: o["Size"] for page in pages for o in page.get("Contents", [])}


def _files(root: Path) -> set[Path]:
    return {f for f in root.rglob("*") if f.is_file()}


async def test_s3_store_a_10_mb_tool_output_goes_to_the_bucket_end_to_end(env, s3, task_queue):
    """A client and worker of their own with an S3 data converter (conftest's share the filesystem store)."""

    def decide(s):
        if s.calls == 1:
            return tool("big", {"size": TEN_MB})
        (ret,) = [p for p in s.requests[-1][-1].parts if isinstance(p, ToolReturnPart)]
        return text(f"tool output {len(ret.content)} chars")

    script = Script(decide)
    converter = data_converter(f"s3://{BUCKET}/{PREFIX}/")
    address = env.client.service_client.config.target_host
    client = await Client.connect(address, namespace=env.client.namespace, data_converter=converter)
    wolf = WolfClient(client, task_queue=task_queue)
    filesystem = Path(os.environ["WOLF_PAYLOAD_STORE"])
    files_before = _files(filesystem)
    worker, hosts = create_worker(client, task_queue=task_queue, local_models={"m": script.model})
    try:
        async with worker:
            # The model sees the whole output (the limit is raised): what is tested is the transport.
            sid = await wolf.submit(
                "a big tool output, please", "a", make_manifest({"limits": {"tool_output_chars": 2 * TEN_MB}})
            )
            result = await wolf.result(sid)
            transcript = await wolf.transcript(sid)  # a >10 MB query answer: through the bucket too
            history = await client.get_workflow_handle(workflow_id("default", sid)).fetch_history()
    finally:
        await hosts.close()
        await close_storage(converter)
    assert not converter.external_storage.drivers[0].clients.is_open()

    assert result.output == f"tool output {TEN_MB} chars"
    (ret,) = [p for m in transcript for p in getattr(m, "parts", []) if isinstance(p, ToolReturnPart)]
    assert ret.content == "x" * TEN_MB  # whole, in the session's transcript

    largest = _largest_payload(history)
    refs = references(history)
    objects = await asyncio.to_thread(_listing, s3.objects)
    biggest = max(objects.values())
    print(
        f"largest payload in history: {largest} bytes; {len(refs)} references in history; "
        f"{len(objects)} objects in the bucket, the largest {biggest} bytes"
    )
    assert largest < 300 * 1024  # references and small payloads only: nothing near 2 MB
    assert refs and all(r["driverName"] == "aws.s3driver" for r in refs)
    keys = {r["claimData"]["key"] for r in refs}
    assert all(k.startswith(f"{PREFIX}/v0/ns/{env.client.namespace}/") for k in keys), keys
    assert keys <= set(objects)  # every reference names an object that is there, prefix included
    assert all(k.startswith(f"{PREFIX}/v0/") for k in objects)
    assert biggest > TEN_MB
    session_scope = f"/wt/SessionWorkflow/wi/wolf%2Fdefault%2F{sid}/"  # temporalio's key layout
    assert all(session_scope in k for k in objects), sorted(objects)
    assert _files(filesystem) == files_before  # nothing went to the filesystem store


async def test_s3_claims_name_the_whole_key_so_any_prefix_reads_them(s3):
    big = "é" * 400_000
    writer = data_converter(f"s3://{BUCKET}/team-a")
    reader = data_converter(f"s3://{BUCKET}/somewhere/else")
    try:
        (stored,) = await writer.encode([big])
        assert stored.ByteSize() < 2048 and b"team-a/v0/d/sha256/" in stored.data
        assert await reader.decode([stored], [str]) == [big]
        again = await writer.encode([big])  # content-addressed: the same object, not a second one
        assert again[0] == stored and len(await asyncio.to_thread(_listing, s3.objects, "team-a/")) == 1
    finally:
        await close_storage(writer)
        await close_storage(reader)


async def test_a_missing_bucket_is_a_clear_store_error(s3):
    converter = data_converter("s3://no-such-bucket/p")
    try:
        with pytest.raises(
            RuntimeError, match=r"S3StorageDriver store failed \[bucket=no-such-bucket"
        ) as failed:
            await converter.encode(["x" * 300_000])
    finally:
        await close_storage(converter)
    message = str(failed.value)
    assert "store=s3://no-such-bucket/p" in message and f"endpoint={s3.endpoint}" in message
    assert "NoSuchBucket" in str(failed.value.__cause__)


# -- selection and errors ---------------------------------------------------------------------------


def test_the_filesystem_stays_the_default(monkeypatch, tmp_path):
    monkeypatch.delenv("WOLF_PAYLOAD_STORE", raising=False)
    monkeypatch.setenv("WOLF_HOME", str(tmp_path))
    default = storage_driver()
    assert isinstance(default, FilesystemDriver) and default.root == tmp_path / "payloads"
    monkeypatch.setenv("WOLF_PAYLOAD_STORE", str(tmp_path / "shared"))
    assert storage_driver().root == tmp_path / "shared"
    assert storage_driver(f"file://{tmp_path}/x").root == tmp_path / "x"


@pytest.mark.parametrize(
    ("location", "name", "bucket", "prefix"),
    [
        ("s3://bucket", "aws.s3driver", "bucket", ""),
        ("s3://bucket/a/b/", "aws.s3driver", "bucket", "a/b"),
        ("gs://bucket/payloads", "gcp.gcsdriver", "bucket", "payloads"),
    ],
)
def test_object_store_selection(monkeypatch, location, name, bucket, prefix):
    monkeypatch.setenv("WOLF_PAYLOAD_STORE", location)
    driver = data_converter().external_storage.drivers[0]
    assert isinstance(driver, ObjectStoreDriver)
    assert (driver.name(), driver.type(), driver.bucket, driver.prefix) == (name, name, bucket, prefix)


@pytest.mark.parametrize(
    ("location", "problem"),
    [("ftp://host/x", "unknown scheme 'ftp'"), ("s3://", "no bucket"), ("gs:///prefix", "no bucket")],
)
def test_bad_locations_are_refused_clearly(location, problem):
    with pytest.raises(PayloadStoreError, match=problem) as refused:
        storage_driver(location)
    assert location in str(refused.value) and "WOLF_PAYLOAD_STORE" in str(refused.value)


@pytest.mark.parametrize(
    ("location", "module", "extra"),
    [
        ("s3://b/p", "aioboto3", "s3"),
        ("s3://b", "types_aiobotocore_s3", "s3"),
        ("gs://b/p", "gcloud.aio.storage", "gcs"),
    ],
)
def test_a_missing_extra_is_named(monkeypatch, location, module, extra):
    for name in [module, *(m for m in sys.modules if m.startswith(f"{module}."))]:
        monkeypatch.setitem(
            sys.modules, name, None
        )  # as if not installed (temporalio's own modules stay cached)
    with pytest.raises(PayloadStoreError, match=rf"pip install 'agentwolf\[{extra}\]'") as refused:
        data_converter(location)
    assert module in str(refused.value)


def test_the_cli_reports_a_bad_store_and_exits_2(tmp_path):
    wolf = str(Path(sys.executable).parent / "wolf")
    env = {**os.environ, "WOLF_PAYLOAD_STORE": "s4://bucket", "WOLF_HOME": str(tmp_path)}
    done = subprocess.run(
        [wolf, "list", "--address", "127.0.0.1:1"],
        env=env,
        check=False,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 2, done.stderr
    assert "unknown scheme 's4'" in done.stderr


# -- GCS: the real driver and temporalio's gcloud-aio adapter against gcloud-aio's client contract --


class _FakeStorage:
    """What temporalio's gcloud-aio adapter calls on `gcloud.aio.storage.Storage`, in memory: 404 for
    a missing object, 412 when `ifGenerationMatch=0` meets an existing one."""

    objects: ClassVar[dict[tuple[str, str], bytes]] = {}
    opened: ClassVar[int] = 0
    closed: ClassVar[int] = 0

    def __init__(self) -> None:
        type(self).opened += 1

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(self, *exc: object) -> None:
        type(self).closed += 1

    @staticmethod
    def _error(status: int):
        from aiohttp import ClientResponseError, RequestInfo
        from yarl import URL

        return ClientResponseError(RequestInfo(URL("http://gcs.invalid"), "GET", {}), (), status=status)  # type: ignore[arg-type]

    async def download_metadata(self, bucket: str, name: str) -> dict:
        if (bucket, name) not in self.objects:
            raise self._error(404)
        return {"name": name}

    async def upload(self, bucket: str, name: str, data: bytes, **kwargs) -> dict:
        assert kwargs["parameters"] == {"ifGenerationMatch": "0"}
        if (bucket, name) in self.objects:
            raise self._error(412)
        self.objects[(bucket, name)] = data
        return {"name": name}

    async def download(self, bucket: str, name: str) -> bytes:
        if (bucket, name) not in self.objects:
            raise self._error(404)
        return self.objects[(bucket, name)]


async def test_gcs_driver_round_trip_under_its_prefix(monkeypatch):
    import gcloud.aio.storage

    monkeypatch.setattr(gcloud.aio.storage, "Storage", _FakeStorage)
    monkeypatch.setattr(_FakeStorage, "objects", {})
    converter = data_converter("gs://wolf-bucket/deploy/7")
    big = {"text": "ü" * 300_000}
    (stored,) = await converter.encode([big])
    ref = json.loads(stored.data)
    assert ref["driverName"] == "gcp.gcsdriver" and ref["claimData"]["object_name"].startswith(
        "deploy/7/v0/d/sha256/"
    )
    assert [name for _, name in _FakeStorage.objects] == [ref["claimData"]["object_name"]]
    assert await data_converter("gs://wolf-bucket").decode([stored], [dict]) == [
        big
    ]  # another prefix reads it
    await converter.encode([big])  # stored again: the object exists, nothing is overwritten
    assert len(_FakeStorage.objects) == 1
    closed = _FakeStorage.closed
    await close_storage(converter)
    assert _FakeStorage.closed == closed + 1


# -- the per-loop client lifecycle ---------------------------------------------------------------


def test_clients_open_once_per_loop_and_close_when_the_loop_ends():
    log: list[str] = []

    class Client:
        async def __aenter__(self):
            log.append("open")
            await asyncio.sleep(0.01)
            return self

        async def __aexit__(self, *exc):
            log.append("close")

    async def open_client(stack: AsyncExitStack) -> Client:
        if log.count("fail-once") == 0:
            log.append("fail-once")
            raise ConnectionError("first open fails")
        return await stack.enter_async_context(Client())

    clients = PerLoop(open_client)

    async def use() -> None:
        with pytest.raises(ConnectionError):
            await clients.get()
        first, second = await asyncio.gather(clients.get(), clients.get())  # one open for both
        assert first is second and clients.is_open()

    async def use_and_close() -> None:
        await clients.get()
        await clients.aclose()
        assert not clients.is_open()

    def in_a_fresh_loop(main) -> None:  # as `asyncio.run` in a CLI command or a worker process
        with ThreadPoolExecutor(1) as pool:
            pool.submit(asyncio.run, main()).result()

    in_a_fresh_loop(use)
    assert log == ["fail-once", "open", "close"]  # closed by the loop's shutdown, nobody asked
    in_a_fresh_loop(use_and_close)
    assert log[3:] == ["open", "close"]
    assert clients._opened == {}
