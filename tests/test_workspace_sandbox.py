"""The bubblewrap sandbox: pydantic-ai's own conformance suite for workspace backends, and what a
command must not reach (the worker's home and environment, outside the workspace, the network) or
exceed (CPU, memory, processes, file size, disk)."""

from __future__ import annotations

import json
import os
import shutil
import threading
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, HTTPServer
from pathlib import Path
from typing import Any

import pytest
from pydantic_ai.workspaces import Workspace, WorkspaceBackend, WorkspaceRef, WorkspaceUnavailableError
from pydantic_ai.workspaces.conformance import WorkspaceBackendSuite

from agentwolf.hosts.bubblewrap import BubblewrapBackend, SandboxLimits, SandboxPolicy, WorkspaceLimitError

pytestmark = pytest.mark.skipif(shutil.which("bwrap") is None, reason="bubblewrap is not installed")


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


@pytest.fixture
def folders(tmp_path: Path) -> Iterator[Callable[[], BubblewrapBackend]]:
    """Backends on fresh folders under a traversable root (the sandbox user of a root worker must
    reach them), each named for its folder."""
    root = tmp_path / "workspaces"
    root.mkdir()

    def make(name: str | None = None) -> BubblewrapBackend:
        name = name or uuid.uuid4().hex
        return BubblewrapBackend(root / name, name=name, create=True)

    yield make


class TestConformance(WorkspaceBackendSuite):
    @pytest.fixture
    def backend(self, folders: Callable[..., BubblewrapBackend]) -> BubblewrapBackend:
        return folders()

    @pytest.fixture
    def fresh_backend(self, folders: Callable[..., BubblewrapBackend]) -> Callable[[], WorkspaceBackend]:
        return folders

    @pytest.fixture
    def attach_backend(self, tmp_path: Path) -> Callable[[WorkspaceRef], WorkspaceBackend]:
        def attach(ref: WorkspaceRef) -> WorkspaceBackend:
            return BubblewrapBackend(tmp_path / "workspaces" / ref.id, name=ref.id)

        return attach

    @pytest.fixture
    def destroy_environment(self) -> Callable[[WorkspaceBackend], object]:
        async def destroy(backend: WorkspaceBackend) -> None:
            shutil.rmtree(await backend.working_dir())

        return destroy

    async def test_a_backend_attached_by_ref_reaches_a_detached_process(self) -> None:  # type: ignore[override]
        pytest.skip(
            "by design: each command has its own PID namespace, so nothing it starts (detached or not) "
            "outlives it; a workspace keeps files between calls, never processes"
        )

    async def test_cancellation_stops_foreground_work(self) -> None:  # type: ignore[override]
        pytest.skip(
            "the rule checks with `kill -0 <pid>` from a second command, and PIDs do not carry between "
            "commands (each has its own PID namespace, where that number is the checking command itself); "
            "test_cancelled_command_is_stopped checks the same rule from the host"
        )


def limited(folder: Path, **limits: int) -> BubblewrapBackend:
    return BubblewrapBackend(
        folder, name=folder.name, create=True, policy=SandboxPolicy(limits=SandboxLimits(**limits))
    )


@pytest.mark.anyio
async def test_cancelled_command_is_stopped(folders: Callable[..., BubblewrapBackend]) -> None:
    """A cancelled command's processes end (checked from the host, where PIDs mean something)."""
    import anyio
    import psutil

    backend = folders()
    before = {p.pid for p in psutil.process_iter()}
    with anyio.move_on_after(1.5):
        await backend.run(["sh", "-c", "sleep 300 & sleep 300"])
    await anyio.sleep(0.5)
    left = [p for p in psutil.process_iter(["name", "cmdline"]) if p.pid not in before]
    assert not [p for p in left if p.info["cmdline"] and "300" in p.info["cmdline"]]


@pytest.mark.anyio
async def test_cannot_read_the_workers_home_or_files_outside(
    folders: Callable[..., BubblewrapBackend], tmp_path: Path
) -> None:
    secret = tmp_path / "secret.txt"
    secret.write_text("the worker's secret")
    secret.chmod(0o644)
    backend = folders()
    home = os.path.expanduser("~")
    result = await backend.run(["sh", "-c", f'ls -A "{home}"; cat "{secret}"; cat /etc/shadow'])
    assert "secret" not in result.stdout and result.exit_code != 0
    assert result.stdout == ""  # the home is an empty folder at most, the others not there
    # A symlink a command leaves is no way out for the worker's own file tools either.
    await backend.run(["ln", "-s", str(secret), "leak"])
    with pytest.raises(PermissionError):
        await Workspace(backend).read_text("leak")


@pytest.mark.anyio
async def test_cannot_write_outside(folders: Callable[..., BubblewrapBackend], tmp_path: Path) -> None:
    backend = folders()
    target = tmp_path / "outside.txt"
    result = await backend.run(["sh", "-c", f'echo x > "{target}"; echo x > /usr/x; echo x > /etc/x'])
    assert result.exit_code != 0 and "Read-only file system" in result.stderr
    assert not target.exists() and not Path("/usr/x").exists()
    with pytest.raises(PermissionError):
        await Workspace(backend).write_text(str(target), "x")


@contextmanager
def loopback_server() -> Iterator[tuple[str, list[str]]]:
    """An HTTP server on 127.0.0.1: its URL and the paths it was asked for."""
    seen: list[str] = []

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            seen.append(self.path)
            self.send_response(200)
            self.end_headers()

    server = HTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}/from-the-sandbox", seen
    finally:
        server.shutdown()


def fetch(url: str) -> list[str]:
    return ["python3", "-c", f"import urllib.request; urllib.request.urlopen({url!r}, timeout=5)"]


@pytest.mark.anyio
async def test_cannot_reach_a_loopback_server(folders: Callable[..., BubblewrapBackend]) -> None:
    with loopback_server() as (url, seen):
        result = await folders().run(fetch(url), timeout=30)
    assert result.exit_code != 0 and "Connection refused" in result.stderr
    assert seen == []


@pytest.mark.anyio
async def test_the_policy_may_open_the_network(tmp_path: Path) -> None:
    backend = BubblewrapBackend(tmp_path / "net", name="net", create=True, policy=SandboxPolicy(network=True))
    with loopback_server() as (url, seen):
        result = await backend.run(fetch(url), timeout=30)
    assert result.exit_code == 0 and seen == ["/from-the-sandbox"]


@pytest.mark.anyio
async def test_the_workers_environment_is_not_inherited(
    folders: Callable[..., BubblewrapBackend], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("WOLF_TEST_WORKER_SECRET", "sk-worker-only-0123456789")
    result = await folders().run(["sh", "-c", "env; cat /proc/1/environ"])
    assert "sk-worker-only" not in result.stdout + result.stderr
    assert "WOLF_TEST_WORKER_SECRET" not in result.stdout


@pytest.mark.anyio
async def test_cpu_time_limit(tmp_path: Path) -> None:
    with pytest.raises(WorkspaceLimitError, match="1 s of CPU time"):
        await limited(tmp_path / "cpu", cpu_s=1).run(["sh", "-c", "while :; do :; done"], timeout=60)


@pytest.mark.anyio
async def test_memory_limit(tmp_path: Path) -> None:
    result = await limited(tmp_path / "mem", memory_mb=64).run(
        ["python3", "-c", "x = bytearray(256 << 20)"], timeout=60
    )
    assert result.exit_code != 0 and "MemoryError" in result.stderr


@pytest.mark.anyio
async def test_process_limit(tmp_path: Path) -> None:
    result = await limited(tmp_path / "procs", processes=8).run(
        ["sh", "-c", "for i in 1 2 3 4 5 6 7 8 9 10 11 12; do sleep 5 & done; wait"], timeout=60
    )
    assert "Cannot fork" in result.stderr or "Resource temporarily unavailable" in result.stderr


@pytest.mark.anyio
async def test_file_size_limit(tmp_path: Path) -> None:
    with pytest.raises(WorkspaceLimitError, match="past the 1 MB limit"):
        await limited(tmp_path / "fsize", file_mb=1).run(["sh", "-c", "head -c 2000000 /dev/zero > big"])


@pytest.mark.anyio
async def test_disk_limit(tmp_path: Path) -> None:
    backend = limited(tmp_path / "disk", file_mb=1, disk_mb=2)
    with pytest.raises(WorkspaceLimitError, match="past its 2 MB limit"):
        await backend.run(["sh", "-c", "for i in 1 2 3; do head -c 900000 /dev/urandom > f$i; done"])
    with pytest.raises(WorkspaceLimitError, match="past its 2 MB limit"):
        await Workspace(backend).write_bytes("more", b"x" * 10)


@pytest.mark.anyio
async def test_attaching_to_a_missing_folder_is_unavailable(tmp_path: Path) -> None:
    with pytest.raises(WorkspaceUnavailableError):
        await BubblewrapBackend(tmp_path / "gone", name="gone").run(["true"])


@pytest.mark.anyio
async def test_read_file_refuses_a_file_past_its_cap(
    folders: Callable[..., BubblewrapBackend], monkeypatch: pytest.MonkeyPatch
) -> None:
    from agentwolf.config.manifest import WorkspaceSettings
    from agentwolf.hosts import workspaces

    monkeypatch.setattr(workspaces, "READ_BYTES", 10)
    backend = folders()
    root = Path(await backend.working_dir())
    (root / "big.txt").write_text("x" * 11)
    result = await workspaces.run_tool(backend, root, "read_file", {"path": "big.txt"}, WorkspaceSettings())
    assert result.is_error and result.content.startswith("big.txt holds 11 bytes, more than read_file reads")


@pytest.mark.anyio
async def test_payload_gc_keeps_every_file_a_recorded_snapshot_names(tmp_path: Path) -> None:
    """A snapshot's root reference (what the session records) keeps its folders and files, those
    unchanged since an older snapshot included: `wolf payloads gc` follows the digests in stored
    payloads."""
    import asyncio

    from agentwolf import workspace_store
    from agentwolf.ops.payload_gc import followed
    from agentwolf.payloads import data_converter

    async def off_loop(fn: Any, *args: Any) -> Any:
        return await asyncio.to_thread(fn, *args)

    store = tmp_path / "store"
    converter = data_converter(str(store))
    root = tmp_path / "tree"
    (root / "a" / "b").mkdir(parents=True)
    (root / "a" / "b" / "deep.txt").write_text("unchanged")
    (root / "top.txt").write_text("one")
    index = workspace_store.index_path(root)
    await workspace_store.take(converter, root, off_loop, index)
    (root / "top.txt").write_text("two")
    taken = await workspace_store.take(converter, root, off_loop, index)
    recorded = json.loads(taken.tree.data)["claimData"]["sha256"]
    kept = followed(store, {recorded})
    stored = {p.name for p in store.rglob("*") if p.is_file()}
    # Only the first snapshot's "one" and its root tree may go: the unchanged deep.txt and folders stay.
    assert len(stored - kept) == 2
    assert (store / recorded[:2] / recorded).exists() and len(kept & stored) == len(stored) - 2


def _stored(store: Path) -> dict[str, int]:
    return {p.name: p.stat().st_size for p in store.rglob("*") if p.is_file()}


@pytest.mark.anyio
async def test_a_three_file_change_in_a_2000_file_folder_stores_about_the_three_files(tmp_path: Path) -> None:
    """A big folder's listing is split into content-addressed buckets: the unchanged part of it
    costs nothing, so the second snapshot puts in the store about what the 3 files hold, not a
    rewritten 2,000-entry listing (measured as bytes added to the store). What it stored reads
    back whole, and `wolf payloads gc` keeps all of it from the recorded root alone."""
    import asyncio

    from agentwolf import workspace_store
    from agentwolf.ops.payload_gc import followed
    from agentwolf.payloads import data_converter

    async def off_loop(fn: Any, *args: Any) -> Any:
        return await asyncio.to_thread(fn, *args)

    store = tmp_path / "store"
    converter = data_converter(str(store))
    root = tmp_path / "tree"
    (root / "big").mkdir(parents=True)
    for i in range(2000):
        (root / "big" / f"module_{i:04d}.py").write_text(f"# module {i}\n" + "x = 1\n" * 20)
    index = workspace_store.index_path(root)
    await workspace_store.take(converter, root, off_loop, index)
    before = _stored(store)
    changed = [root / "big" / f"module_{i:04d}.py" for i in (0, 777, 1999)]
    for path in changed:
        path.write_text(path.read_text() + "y = 2\n")
    taken = await workspace_store.take(converter, root, off_loop, index)
    added = sum(size for name, size in _stored(store).items() if name not in before)
    files = sum(p.stat().st_size for p in changed)
    assert files < added < files + 3 * 6_000, (files, added)

    listed = await workspace_store.listing(converter, taken.tree)
    assert len(listed) == 2001 and listed["big/module_0777.py"]["s"] == changed[1].stat().st_size
    restored = await workspace_store.restore(converter, taken.tree, tmp_path / "again", off_loop)
    assert restored.files == 2000
    assert (tmp_path / "again" / "big" / "module_1999.py").read_text().endswith("y = 2\n")
    recorded = json.loads(taken.tree.data)["claimData"]["sha256"]
    kept = followed(store, {recorded})
    assert set(_stored(store)) - kept == {n for n in before if n not in kept}  # only the first's own
    # What may go: the 3 files' old bytes, and per file a bucket and the trees above it, and the root's.
    assert len(set(_stored(store)) - kept) <= 3 * 4 + 1


@pytest.mark.anyio
async def test_a_snapshot_in_the_old_layout_still_reads_and_restores(tmp_path: Path) -> None:
    """Snapshots recorded before big listings were split hold one JSON listing per folder however
    many entries it has: listing, reading and restoring still take them, and the next snapshot of
    the restored folder stores only what changed since."""
    import asyncio

    from agentwolf import workspace_store
    from agentwolf.payloads import data_converter, storing_all
    from agentwolf.workflows.archive import StoredRef

    async def off_loop(fn: Any, *args: Any) -> Any:
        return await asyncio.to_thread(fn, *args)

    converter = data_converter(str(tmp_path / "store"))
    always = storing_all(converter)
    assert always is not None
    datas = [f"file {i}\n".encode() for i in range(300)]
    refs = await always.encode(datas)
    entries = [
        {"n": f"f{i:03d}.txt", "k": "f", "m": 0o644, "r": ref.data.decode(), "s": len(data)}
        for i, (ref, data) in enumerate(zip(refs, datas, strict=True))
    ]
    [sub] = await always.encode([json.dumps({"v": 1, "entries": entries}).encode()])
    top = {"v": 1, "entries": [{"n": "many", "k": "d", "m": 0o755, "r": sub.data.decode()}]}
    [ref] = await always.encode([json.dumps(top).encode()])
    tree = StoredRef(metadata={k: v.decode() for k, v in ref.metadata.items()}, data=ref.data.decode())

    assert len(await workspace_store.listing(converter, tree)) == 301
    assert await workspace_store.read(converter, tree, "many/f123.txt") == b"file 123\n"
    root = tmp_path / "ws"
    await workspace_store.restore(converter, tree, root, off_loop)
    assert (root / "many" / "f299.txt").read_bytes() == b"file 299\n"
    index = workspace_store.index_path(root)
    split = await workspace_store.take(converter, root, off_loop, index)  # stores the split listing once
    new, old = (
        await workspace_store.listing(converter, split.tree),
        await workspace_store.listing(converter, tree),
    )
    assert (
        split.stored_bytes < 60_000
        and new.keys() == old.keys()
        and new["many/f007.txt"] == old["many/f007.txt"]
    )
    (root / "many" / "f000.txt").write_text("changed\n")
    taken = await workspace_store.take(converter, root, off_loop, index)
    assert taken.files == 300 and taken.stored_bytes < 8_000
