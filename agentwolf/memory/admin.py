"""What an operator does to an owner's memory (`wolf memory ...`): list, show with its chain, search,
forget, export, import and purge. Writes carry provenance `operator` or `imported`; an import's key
is the digest of its line, so importing a file twice adds nothing."""

from __future__ import annotations

import hashlib
import json
import uuid
from collections.abc import Iterable, Iterator
from dataclasses import asdict
from typing import Any

from agentwolf.memory import ranking
from agentwolf.memory.namespaces import SHARED, Layer, Namespace
from agentwolf.memory.store import (
    FILE,
    PENDING,
    TOMBSTONE,
    MemoryStore,
    MemoryStoreError,
    NewRow,
    Plan,
    Reader,
    Row,
)
from agentwolf.workflows.memory_tools import KINDS, MemoryView, Provenance

MAIN = MemoryView()
"""The main line: what ordinary sessions see (forks' own rows are left out)."""


def namespaces(
    store: MemoryStore, tenant: str, owner: str, agent: str | None, layer: Layer = "own"
) -> list[Namespace]:
    """The owner's namespaces (of one agent, or every agent the store has rows for), or a shared layer."""
    if layer != "own":
        if agent is None and layer == "agent":
            raise MemoryStoreError("the agent layer needs --agent")
        return [Namespace(tenant, SHARED, agent or SHARED).layer(layer)]
    if agent is not None:
        return [Namespace(tenant, owner, agent)]
    return store.namespaces(tenant, owner)


def current(store: MemoryStore, spaces: list[Namespace]) -> list[Row]:
    return store.current(MAIN, spaces, kinds=[*KINDS, FILE, PENDING]) if spaces else []


def find(store: MemoryStore, spaces: list[Namespace], row_id: str) -> list[Row]:
    """The row and every row of its chain (what it superseded, what superseded it), newest first."""
    rows = store.history(spaces, limit=100_000)
    by_id = {(r.ns, r.id): r for r in rows}
    found = [r for r in rows if r.id == row_id]
    chain: dict[tuple[str, str], Row] = {}
    for row in found:
        todo = [row]
        while todo:
            r = todo.pop()
            if (r.ns, r.id) in chain:
                continue
            chain[(r.ns, r.id)] = r
            if r.supersedes and (r.ns, r.supersedes) in by_id:
                todo.append(by_id[(r.ns, r.supersedes)])
            todo += [s for s in rows if s.ns == r.ns and s.supersedes == r.id]
    return sorted(chain.values(), key=lambda r: (r.ns, -r.revision))


def search(store: MemoryStore, spaces: list[Namespace], query: str, k: int) -> list[Row]:
    return ranking.rank(store.search(MAIN, spaces, ranking.terms(query), ranking.POOL), query, k)


def forget(store: MemoryStore, ns: Namespace, row_id: str, reason: str) -> str:
    def plan(reader: Reader) -> Plan:
        rows = reader.current(MAIN, [ns], ids=[row_id], kinds=[*KINDS, FILE, PENDING], limit=1)
        if not rows:
            return Plan(error=f"no current memory {row_id!r} in {ns.key}")
        return Plan([NewRow(TOMBSTONE, reason, path=rows[0].path, supersedes=row_id)], f"forgot {row_id}")

    provenance = Provenance(source="operator")
    return store.write(ns, MAIN, f"operator/{uuid.uuid4().hex}", "", provenance, plan).answer


def approve(store: MemoryStore, ns: Namespace, row_id: str, kind: str) -> str:
    """A pending memory (`memory.extract: review`) kept as a `kind` record: a new row superseding it."""

    def plan(reader: Reader) -> Plan:
        rows = reader.current(MAIN, [ns], ids=[row_id], kinds=[PENDING], limit=1)
        if not rows:
            return Plan(error=f"no pending memory {row_id!r} in {ns.key}")
        return Plan(
            [NewRow(kind, rows[0].body, rows[0].about, supersedes=row_id)], f"approved {row_id} as {{id}}"
        )

    provenance = Provenance(source="operator")
    return store.write(ns, MAIN, f"operator/{uuid.uuid4().hex}", "", provenance, plan).answer


def export(rows: Iterable[Row]) -> Iterator[str]:
    """Rows as JSON Lines (every field, provenance included)."""
    for row in rows:
        record: dict[str, Any] = asdict(row)
        record.pop("score", None)
        record["provenance"] = row.provenance.model_dump()
        yield json.dumps(record, ensure_ascii=False)


def import_lines(store: MemoryStore, ns: Namespace, lines: Iterable[str]) -> int:
    """The current records and files of an export (or `{"kind", "body", "about"?, "path"?}` lines)
    added to `ns` as new rows, oldest first; a line imported before adds nothing. Returns the rows
    added."""
    items = [json.loads(line) for line in lines if line.strip()]
    ended = {(i.get("ns"), i["supersedes"]) for i in items if i.get("supersedes")}
    items = [i for i in items if (i.get("ns"), i.get("id")) not in ended]  # an export's history stays out
    items.sort(key=lambda i: int(i.get("revision") or 0))
    added = 0
    for item in items:
        kind, body = item.get("kind"), item.get("body")
        if kind not in (*KINDS, FILE) or not isinstance(body, str):
            continue
        about, path = str(item.get("about") or ""), item.get("path") if kind == FILE else None
        key = "import/" + hashlib.sha256(json.dumps([kind, body, about, path]).encode()).hexdigest()

        def plan(
            reader: Reader, kind: str = kind, body: str = body, about: str = about, path: Any = path
        ) -> Plan:
            old = reader.current(MAIN, [ns], kinds=[FILE], path=path, limit=1) if path else []
            return Plan([NewRow(kind, body, about, path, old[0].id if old else None)], "ok")

        added += not store.write(ns, MAIN, key, key, Provenance(source="imported"), plan).replayed
    return added
