"""The filesystem payload store trusts no claim and no file it reads, keeps its files private, takes
concurrent writers, and `wolf payloads gc` removes only old payloads no running workflow references."""

from __future__ import annotations

import asyncio
import json
import os
import stat
import subprocess
import sys
import time
from collections.abc import Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest
from temporalio.api.common.v1 import Payload
from temporalio.converter import StorageDriverClaim, StorageDriverRetrieveContext, StorageDriverStoreContext

from agentwolf.ops.payload_gc import _sweep, followed
from agentwolf.payloads import FilesystemDriver
from tests.conftest import make_manifest, wait_for
from tests.support.models import Script, text
from tests.support.polls import idle

WOLF = str(Path(sys.executable).parent / "wolf")
DIGEST = "ab" * 32
MONTH = 30 * 24 * 3600


def _payload(size: int, seed: str) -> Payload:
    return Payload(metadata={"encoding": b"binary/plain"}, data=(seed * size).encode()[:size])


async def _store(driver: FilesystemDriver, payloads: Sequence[Payload]) -> list[StorageDriverClaim]:
    return await driver.store(StorageDriverStoreContext(target=None), payloads)


async def _retrieve(driver: FilesystemDriver, claims: Sequence[StorageDriverClaim]) -> list[Payload]:
    return await driver.retrieve(StorageDriverRetrieveContext(), claims)


def _stored(store: Path) -> set[Path]:
    return {f for f in store.rglob("*") if f.is_file()}


_opened: list[str] | None = None
_hooked = False


def _record_opens(event: str, args: tuple[Any, ...]) -> None:
    if event == "open" and _opened is not None and isinstance(args[0], str | bytes | os.PathLike):
        path = os.fsdecode(args[0])
        if not path.endswith((".py", ".pyc")):  # a module imported meanwhile (first use, any thread)
            _opened.append(path)


@contextmanager
def _opens() -> Iterator[list[str]]:
    """Every path this process opens inside the block (an audit hook; hooks stay, so it is added once)."""
    global _opened, _hooked
    if not _hooked:
        sys.addaudithook(_record_opens)
        _hooked = True
    _opened = seen = []
    try:
        yield seen
    finally:
        _opened = None


@pytest.mark.parametrize(
    "claim",
    [
        "/etc/passwd",
        "../../etc/passwd",
        DIGEST[:63],
        DIGEST.upper(),
        DIGEST[:40] + "\x00" + DIGEST[41:],
        "../../" + DIGEST,
        "/etc/" + DIGEST,
    ],
)
async def test_a_hostile_claim_is_refused_and_opens_nothing(tmp_path, claim):
    driver = FilesystemDriver(tmp_path / "store")
    await _store(driver, [_payload(300_000, "x")])
    with _opens() as opened, pytest.raises(ValueError, match="refused") as refused:
        await _retrieve(driver, [StorageDriverClaim({"sha256": claim})])
    assert repr(claim) in str(refused.value)
    assert opened == []  # refused before any open, in the store or outside it


async def test_a_tampered_file_fails_on_read(tmp_path):
    driver = FilesystemDriver(tmp_path / "store")
    [claim] = await _store(driver, [_payload(300_000, "y")])
    [path] = _stored(driver.root)
    data = bytearray(path.read_bytes())
    data[-1] ^= 1  # still a valid protobuf: only the digest can tell
    path.write_bytes(bytes(data))
    with pytest.raises(ValueError, match="corrupt or tampered") as tampered:
        await _retrieve(driver, [claim])
    assert claim.claim_data["sha256"] in str(tampered.value)


async def test_files_are_0600_and_folders_0700(tmp_path):
    root = tmp_path / "store"
    root.mkdir(mode=0o755)  # an existing store, as an older version left it
    root.chmod(0o755)
    driver = FilesystemDriver(root)
    await _store(driver, [_payload(300_000, "z")])
    [path] = _stored(root)
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert stat.S_IMODE(path.parent.stat().st_mode) == 0o700
    assert stat.S_IMODE(root.stat().st_mode) == 0o700
    fresh = FilesystemDriver(tmp_path / "new" / "store")
    await _store(fresh, [_payload(300_000, "z")])
    assert stat.S_IMODE(fresh.root.stat().st_mode) == 0o700


async def test_concurrent_writers_of_different_and_same_payloads(tmp_path):
    driver = FilesystemDriver(tmp_path / "store")

    def batch(tag: str) -> list[Payload]:
        return [_payload(400_000, f"{tag} {i}") for i in range(8)] + [_payload(2_000_000, f"{tag} same")] * 24

    tasks, threads = batch("tasks"), batch("threads")
    task_claims = await asyncio.gather(*(_store(driver, [p]) for p in tasks))
    with ThreadPoolExecutor(16) as pool:  # each thread its own event loop, as separate clients would be
        thread_claims = list(pool.map(lambda p: asyncio.run(_store(driver, [p])), threads))
    claims = [c for [c] in task_claims + thread_claims]
    assert await _retrieve(driver, claims) == tasks + threads
    assert {p.name for p in _stored(driver.root)} == {
        c.claim_data["sha256"] for c in claims
    }  # no temp file left


# -- wolf payloads gc ------------------------------------------------------------------------------


async def _wolf(address: str | None, *args: str, **env: str) -> subprocess.CompletedProcess[str]:
    environ = {**os.environ, "NO_COLOR": "1", **env}
    environ.pop("TEMPORAL_ADDRESS", None)
    if address:
        environ["TEMPORAL_ADDRESS"] = address
    return await asyncio.to_thread(
        subprocess.run, [WOLF, *args], capture_output=True, text=True, env=environ, timeout=120
    )


def _age(paths: set[Path], seconds: float) -> None:
    when = time.time() - seconds
    for path in paths:
        os.utime(path, (when, when))


async def test_gc_keeps_what_a_running_session_references_and_young_payloads(client, wolf, run_worker):
    address = client.service_client.config.target_host
    store = Path(os.environ["WOLF_PAYLOAD_STORE"])
    driver = FilesystemDriver(store)
    before = _stored(store)
    async with run_worker(local_models={"m": Script(lambda s: text("ok")).model}):
        sid = await wolf.start_session("a", make_manifest({"capabilities": []}, mcp_servers={}))
        await wolf.prompt(sid, "p" * 400_000)  # over 256 KiB: the store holds it, history a claim
        await wait_for(lambda: idle(wolf, sid))
        referenced = _stored(store) - before
        assert referenced
        [old], [young] = (
            await _store(driver, [_payload(300_000, "old")]),
            await _store(driver, [_payload(300_000, "young")]),
        )
        old_path, young_path = (
            store / c.claim_data["sha256"][:2] / c.claim_data["sha256"] for c in (old, young)
        )
        _age({*referenced, old_path}, MONTH)  # only a reference keeps the session's payloads now

        dry = await _wolf(address, "payloads", "gc", "--dry-run", "--json")
        assert dry.returncode == 0, dry.stderr
        report = json.loads(dry.stdout)
        assert report["dry_run"] is True
        assert old.claim_data["sha256"] in report["removed"]
        assert not {p.name for p in referenced} & set(report["removed"])
        assert young.claim_data["sha256"] not in report["removed"]
        assert old_path.exists()  # a dry run removes nothing

        run = await _wolf(address, "payloads", "gc", "--older-than", "1d")
        assert run.returncode == 0, run.stderr
        assert "removed" in run.stdout and "referenced by running workflows" in run.stdout
        assert not old_path.exists()
        assert young_path.exists()
        assert all(p.exists() for p in referenced)
        claims = [StorageDriverClaim({"sha256": p.name}) for p in referenced]
        assert all(p.ByteSize() for p in await _retrieve(driver, claims))  # intact, digests verified
        await wolf.close(sid)


async def test_gc_keeps_what_a_kept_payload_names_and_nothing_else(tmp_path):
    """A continue-as-new input stored by reference names the session's archived transcript parts:
    history shows only the input's claim, so the parts are kept through it (and what they name)."""
    driver = FilesystemDriver(tmp_path)

    async def stored(data: bytes) -> str:
        [claim] = await _store(driver, [Payload(data=data)])
        return claim.claim_data["sha256"]

    inner = await stored(b"x" * 1000)
    part = await stored(json.dumps({"claimData": {"sha256": inner}}).encode())  # names `inner`
    snapshot = await stored(json.dumps({"archive": {"data": json.dumps({"sha256": part})}}).encode())
    loose = await stored(b"y" * 1000)
    kept = followed(tmp_path, {snapshot, "f" * 64})  # and a claim this store lacks
    assert kept == {snapshot, part, inner, "f" * 64}
    _age(set(tmp_path.glob("??/*")), MONTH)
    report = _sweep(tmp_path, kept, 86_400, dry_run=False, running=1)
    assert report.removed == [loose] and report.kept_referenced == 3


async def test_gc_leaves_object_stores_to_bucket_lifecycle_rules():
    run = await _wolf("127.0.0.1:1", "payloads", "gc", WOLF_PAYLOAD_STORE="s3://bucket/prefix")
    assert run.returncode == 2
    assert "lifecycle rule" in run.stderr


async def test_gc_refuses_a_bad_duration(tmp_path):
    run = await _wolf(
        "127.0.0.1:1", "payloads", "gc", "--older-than", "7 days", WOLF_PAYLOAD_STORE=str(tmp_path)
    )
    assert run.returncode == 2
    assert "7 days" in run.stderr and "e.g. 7d" in run.stderr
