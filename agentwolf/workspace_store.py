"""Workspace snapshots in the payload store, content-addressed by file, like git's trees.

Each file's bytes are one stored payload and each folder one more: a JSON tree naming its entries
(name, kind, mode, size, and the stored reference of a file's bytes or a sub-folder's tree), as
plain JSON: `wolf payloads gc` keeps what a kept payload names by the digests it finds in its bytes
(ops/payload_gc.py), so a session's recorded root keeps every folder and file of its snapshot. The
session records only the root tree's reference per turn. A snapshot reads and stores only what
changed since the last one: an index beside the folder (outside the sandbox's reach) keeps each
file's stat signature and reference and each stored tree by digest, so an unchanged file is not
read and an unchanged tree not stored again; the store itself deduplicates equal contents (an
activity retry stores nothing new).

A folder of more than `SPLIT_ENTRIES` entries is not one listing (a change would rewrite all of
it): its tree is `{"v": 2, "buckets": [...]}`, `FANOUT` references (or null) to the trees of its
entries split by a hex digit of their name's SHA-256 (the first digit at the top, the next one
below, until a bucket holds at most `SPLIT_ENTRIES`), the shape of a hash array mapped trie. The
shape follows from the names alone, so a change rewrites one small bucket and the few nodes above
it, and equal buckets are equal payloads. Readers take both kinds of tree at any size, so
snapshots recorded before the split (one `"v": 1` listing per folder) still read.

A restore writes the tree into a fresh folder beside the workspace's and swaps it in, so a restore
cut short leaves the old folder or the new one, never half of each.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import stat as stat_module
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath
from typing import Any

import pydantic_core
from temporalio.api.common.v1 import Payload
from temporalio.converter import DataConverter

from agentwolf.payloads import storing_all
from agentwolf.workflows.archive import StoredRef

BATCH_BYTES = 16 << 20
"""Files stored or read in one round trip to the store, by size."""
INDEX_SUFFIX = ".index.json"
SPLIT_ENTRIES = 64
"""A folder listing with more entries is split into buckets (a change rewrites one of them)."""
FANOUT = 16
"""Buckets per split: one per hex digit of the entry name's hash."""


class SnapshotError(ValueError):
    """A snapshot that cannot be taken (no payload store) or read back."""


@dataclass
class Taken:
    """A snapshot's root tree and what it holds and cost."""

    tree: StoredRef
    files: int = 0
    bytes: int = 0
    stored_bytes: int = 0


@dataclass
class _Index:
    """The last snapshot's (or restore's) references: files by stat signature, trees (folders and
    their buckets) by the digest of their JSON."""

    files: dict[str, tuple[list[int], str]] = field(default_factory=dict)
    trees: dict[str, str] = field(default_factory=dict)
    meta: dict[str, str] = field(default_factory=dict)

    @classmethod
    def load(cls, path: Path) -> _Index:
        """The index at `path`; an unreadable one is empty (the next snapshot reads every file
        again), one written before trees were indexed by digest has no trees."""
        try:
            raw = pydantic_core.from_json(path.read_bytes())
            return cls(
                files={k: (list(v[0]), v[1]) for k, v in raw["files"].items()},
                trees=dict(raw.get("trees", {})),
                meta=raw["meta"],
            )
        except (OSError, ValueError, KeyError, TypeError):
            return cls()

    def save(self, path: Path) -> None:
        tmp = path.with_name(path.name + ".tmp")
        # pydantic-core's encoder: the stdlib's took ~10x longer on a 5,000-file index.
        tmp.write_bytes(pydantic_core.to_json({"files": self.files, "trees": self.trees, "meta": self.meta}))
        os.replace(tmp, path)


def index_path(root: Path) -> Path:
    return root.with_name(root.name + INDEX_SUFFIX)


def _signature(info: os.stat_result) -> list[int]:
    return [info.st_mtime_ns, info.st_ctime_ns, info.st_size, info.st_ino]


@dataclass
class _Entry:
    name: str
    kind: str  # "f" file, "d" folder, "l" symlink
    mode: int
    size: int = 0
    ref: str = ""
    target: str = ""

    def dump(self) -> dict[str, Any]:
        out: dict[str, Any] = {"n": self.name, "k": self.kind, "m": self.mode}
        if self.kind == "l":
            out["t"] = self.target
        else:
            out["r"] = self.ref
        if self.kind == "f":
            out["s"] = self.size
        return out


def _bucket(name: str, depth: int) -> int:
    """The bucket of entry `name` in a split at `depth`: the `depth`-th hex digit of its hash."""
    digest = hashlib.sha256(name.encode(errors="surrogateescape")).digest()
    byte = digest[depth // 2]
    return byte >> 4 if depth % 2 == 0 else byte & 0x0F


MAX_DEPTH = 64
"""Hex digits in a SHA-256: a bucket this deep is one listing however many entries it holds."""


def _scan(root: Path) -> dict[str, list[tuple[str, os.stat_result, str]]]:
    """Each folder's entries (relative path "" for the root): name, lstat, symlink target."""
    folders: dict[str, list[tuple[str, os.stat_result, str]]] = {}
    stack = [""]
    while stack:
        rel = stack.pop()
        entries = folders.setdefault(rel, [])
        with os.scandir(root / rel if rel else root) as scan:
            for item in scan:
                info = item.stat(follow_symlinks=False)
                child = f"{rel}/{item.name}" if rel else item.name
                target = os.readlink(item.path) if stat_module.S_ISLNK(info.st_mode) else ""
                if stat_module.S_ISDIR(info.st_mode):
                    stack.append(child)
                elif not (stat_module.S_ISREG(info.st_mode) or stat_module.S_ISLNK(info.st_mode)):
                    continue  # FIFOs, sockets, devices: not content
                entries.append((item.name, info, target))
        entries.sort(key=lambda e: e[0])
    return folders


def _batches(items: list[tuple[str, int]]) -> Iterator[list[str]]:
    batch: list[str] = []
    size = 0
    for path, length in items:
        batch.append(path)
        size += length
        if size >= BATCH_BYTES:
            yield batch
            batch, size = [], 0
    if batch:
        yield batch


def _ref(payload: Payload) -> tuple[dict[str, str], str]:
    return {k: v.decode() for k, v in payload.metadata.items()}, payload.data.decode()


def _payload(meta: dict[str, str], data: str) -> Payload:
    return Payload(metadata={k: v.encode() for k, v in meta.items()}, data=data.encode())


@dataclass
class _Trees:
    """Stores a snapshot's trees: a folder's listing, split into buckets when it is big."""

    always: DataConverter
    """The converter storing every payload (payloads.storing_all)."""
    index: _Index
    fresh: _Index
    taken: Taken

    async def store(self, entries: list[dict[str, Any]]) -> str:
        """The reference of a folder's tree."""
        [ref] = await self._stored([_split(entries, 0)])
        return ref

    async def _stored(self, nodes: list[_Node]) -> list[str]:
        """The references of trees, those not stored yet (by the last snapshot or this one) stored
        in one round trip, after their buckets (one round trip per level)."""
        below = [bucket for node in nodes if isinstance(node, list) for bucket in node if bucket is not None]
        refs = iter(await self._stored(below) if below else [])
        bodies = [
            node
            if isinstance(node, dict)
            else {"v": 2, "buckets": [None if b is None else next(refs) for b in node]}
            for node in nodes
        ]
        digests = [_digest(body) for body in bodies]
        for digest in digests:
            if digest not in self.fresh.trees and digest in self.index.trees:
                self.fresh.trees[digest] = self.index.trees[digest]
        new = {
            d: pydantic_core.to_json(b)
            for d, b in zip(digests, bodies, strict=True)
            if d not in self.fresh.trees
        }
        if new:
            for digest, payload in zip(new, await self.always.encode(list(new.values())), strict=True):
                self.fresh.meta, self.fresh.trees[digest] = _ref(payload)
            self.taken.stored_bytes += sum(len(packed) for packed in new.values())
        return [self.fresh.trees[d] for d in digests]


_Node = dict[str, Any] | list[Any]
"""A tree to store: a listing's JSON, or a split's buckets (each a `_Node`, or None when empty)."""


def _split(entries: list[dict[str, Any]], depth: int) -> _Node:
    """A folder's listing as one tree, or split into buckets by the names' hashes while it is big."""
    if len(entries) <= SPLIT_ENTRIES or depth == MAX_DEPTH:
        return {"v": 1, "entries": entries}
    parts: list[list[dict[str, Any]]] = [[] for _ in range(FANOUT)]
    for entry in entries:
        parts[_bucket(entry["n"], depth)].append(entry)
    return [_split(part, depth + 1) if part else None for part in parts]


async def take(
    converter: DataConverter, root: Path, run: Callable[..., Any], index_file: Path | None = None
) -> Taken:
    """Snapshot the folder `root` (`run(fn, *args)` runs blocking work off the event loop), reading
    only what changed since the snapshot `index_file` describes (None: no index, read it all)."""
    always = storing_all(converter)
    if always is None:
        raise SnapshotError("workspace snapshots need a payload store, and this data converter has none")
    index: _Index = await run(_Index.load, index_file) if index_file else _Index()
    folders = await run(_scan, root)
    fresh = _Index(meta=dict(index.meta))
    taken = Taken(tree=StoredRef(metadata={}, data=""))
    trees = _Trees(always, index, fresh, taken)

    changed: list[tuple[str, int]] = []
    for rel, entries in folders.items():
        for name, info, _ in entries:
            path = f"{rel}/{name}" if rel else name
            if not stat_module.S_ISREG(info.st_mode):
                continue
            taken.files += 1
            taken.bytes += info.st_size
            known = index.files.get(path)
            if known is not None and known[0] == _signature(info):
                fresh.files[path] = known
            else:
                changed.append((path, info.st_size))

    for batch in _batches(changed):
        datas: list[bytes] = await run(lambda b=batch: [(root / p).read_bytes() for p in b])
        refs = await always.encode(datas)
        for path, data, ref in zip(batch, datas, refs, strict=True):
            fresh.meta, text = _ref(ref)
            fresh.files[path] = (_signature((root / path).lstat()), text)
            taken.stored_bytes += len(data)

    # Folders deepest first, so each one's sub-folders have their trees.
    dirs: dict[str, str] = {}
    for rel in sorted(folders, key=lambda r: r.count("/") + bool(r), reverse=True):
        entries = []
        for name, info, target in folders[rel]:
            path = f"{rel}/{name}" if rel else name
            mode = stat_module.S_IMODE(info.st_mode)
            if stat_module.S_ISDIR(info.st_mode):
                entries.append(_Entry(name, "d", mode, ref=dirs[path]))
            elif stat_module.S_ISLNK(info.st_mode):
                entries.append(_Entry(name, "l", mode, target=target))
            else:
                entries.append(_Entry(name, "f", mode, size=info.st_size, ref=fresh.files[path][1]))
        dirs[rel] = await trees.store([e.dump() for e in entries])
    if index_file is not None:
        await run(fresh.save, index_file)
    taken.tree = StoredRef(metadata=fresh.meta, data=dirs[""])
    return taken


# -- reading back ------------------------------------------------------------------------------------


async def _trees(converter: DataConverter, meta: dict[str, str], refs: list[str]) -> list[dict[str, Any]]:
    try:
        packed = await converter.decode([_payload(meta, r) for r in refs], [bytes] * len(refs))
        return [pydantic_core.from_json(p) for p in packed]
    except Exception as exc:  # noqa: BLE001 - whatever the store says, the snapshot is unreadable
        raise SnapshotError(f"a workspace snapshot could not be read back: {exc}") from exc


def _digest(body: dict[str, Any]) -> str:
    """A tree's identity (its keys in the order `_Entry.dump` writes them, kept by a load)."""
    return hashlib.sha256(pydantic_core.to_json(body)).hexdigest()


async def listing(converter: DataConverter, tree: StoredRef) -> dict[str, dict[str, Any]]:
    """Every entry of the snapshot by relative path (folders too), in path order."""
    return dict(sorted((await _walk(converter, tree))[0].items()))


async def _walk(
    converter: DataConverter, tree: StoredRef
) -> tuple[dict[str, dict[str, Any]], dict[str, str]]:
    """The entries by path, and every tree read by digest (folders and their buckets, either
    layout): a level of trees per round trip."""
    out: dict[str, dict[str, Any]] = {}
    trees: dict[str, str] = {}
    level = [("", tree.data)]
    while level:
        bodies = await _trees(converter, tree.metadata, [r for _, r in level])
        nxt = []
        for (rel, ref), body in zip(level, bodies, strict=True):
            trees[_digest(body)] = ref
            nxt += [(rel, bucket) for bucket in body.get("buckets", ()) if bucket is not None]
            for entry in body.get("entries", ()):
                path = f"{rel}/{entry['n']}" if rel else entry["n"]
                out[path] = entry
                if entry["k"] == "d":
                    nxt.append((path, entry["r"]))
        level = nxt
    return out, trees


async def contents(converter: DataConverter, meta: dict[str, str], refs: list[str]) -> list[bytes]:
    """Stored file bytes by reference (equal references read once)."""
    unique = list(dict.fromkeys(refs))
    try:
        datas = await converter.decode([_payload(meta, r) for r in unique], [bytes] * len(unique))
    except Exception as exc:  # noqa: BLE001 - as in _trees
        raise SnapshotError(f"a workspace file could not be read back from its snapshot: {exc}") from exc
    by_ref = dict(zip(unique, datas, strict=True))
    return [by_ref[r] for r in refs]


async def read(converter: DataConverter, tree: StoredRef, path: str) -> bytes:
    """One file of a snapshot."""
    rel = str(PurePosixPath(path.strip("/") or "."))
    entry = (await listing(converter, tree)).get(rel)
    if entry is None or entry["k"] != "f":
        raise FileNotFoundError(f"no file {path!r} in that snapshot")
    [data] = await contents(converter, tree.metadata, [entry["r"]])
    return data


async def restore(
    converter: DataConverter, tree: StoredRef, root: Path, run: Callable[..., Any], uid: int | None = None
) -> Taken:
    """Make `root` hold exactly the snapshot (a fresh folder swapped in), owned by `uid` if given; the
    index then names what was restored, so the next snapshot stores only later changes."""
    entries, trees = await _walk(converter, tree)
    staging = root.with_name(f".{root.name}.restoring")
    await run(shutil.rmtree, staging, True)
    await run(lambda: staging.mkdir(parents=True, mode=0o755))
    index = _Index(trees=trees, meta=dict(tree.metadata))
    taken = Taken(tree=tree)
    files = [(p, e) for p, e in entries.items() if e["k"] == "f"]

    def place_folders() -> None:
        for path, entry in sorted(entries.items()):
            target = staging / path
            if entry["k"] == "d":
                target.mkdir(mode=0o755)
            elif entry["k"] == "l":
                target.symlink_to(entry["t"])

    await run(place_folders)
    for batch in _batches([(p, int(e.get("s", 0))) for p, e in files]):
        datas = await contents(converter, tree.metadata, [entries[p]["r"] for p in batch])

        def write(batch: list[str] = batch, datas: list[bytes] = datas) -> None:
            for path, data in zip(batch, datas, strict=True):
                target = staging / path
                target.write_bytes(data)
                target.chmod(entries[path]["m"])
                taken.files += 1
                taken.bytes += len(data)

        await run(write)

    def finish() -> None:
        for path, entry in sorted(entries.items(), reverse=True):
            target = staging / path
            if entry["k"] == "d":
                target.chmod(entry["m"])
            if uid is not None:
                os.lchown(target, uid, uid)
        if uid is not None:
            os.chown(staging, uid, uid)
        old = root.with_name(f".{root.name}.old")
        shutil.rmtree(old, ignore_errors=True)
        if root.exists():
            os.replace(root, old)
        os.replace(staging, root)
        shutil.rmtree(old, ignore_errors=True)
        for path, entry in files:
            index.files[path] = (_signature((root / path).lstat()), entry["r"])
        index.save(index_path(root))

    await run(finish)
    return taken
