"""What the SQLite and PostgreSQL stores share: the rows' table, the view a fork has (which rows
are visible, which are current), writes with receipts. A store adds its connection, its full-text
index and how it locks a namespace for a write. Statements use `?`; PostgreSQL's store turns them
into its own placeholders."""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from typing import Any

from agentwolf.memory.namespaces import Namespace, owner_prefix
from agentwolf.memory.store import MemoryStoreError, NewRow, Plan, Reader, Receipt, Row
from agentwolf.workflows.memory_tools import MemoryView, Provenance

COLUMNS = (
    "ns, id, revision, branch, kind, body, about, path, supersedes, "
    "writer, turn, turn_seq, call, model, source, created"
)

INSERTED = f"{COLUMNS}, tenant, owner"
PLACES = ", ".join("?" * 18)
WINDOW = 4
"""A search reads the index's best WINDOW x k matches before checking which are current."""
MAX_WINDOW = 1 << 16


def visible(view: MemoryView, alias: str, params: list[Any]) -> str:
    """The rows of `alias` this view sees: its own line whole, and each cut line up to its cut."""
    clauses = [f"{alias}.branch = ?"]
    params.append(view.branch)
    for cut in view.cuts:
        clause = [f"{alias}.branch = ?"]
        params.append(cut.branch)
        for ns, revision in cut.revisions.items():
            clause.append(f"({alias}.ns <> ? OR {alias}.revision <= ?)")
            params += [ns, revision]
        if cut.writer and cut.after_turn is not None:
            clause.append(f"NOT ({alias}.writer = ? AND {alias}.turn_seq > ?)")
            params += [cut.writer, cut.after_turn]
        clauses.append("(" + " AND ".join(clause) + ")")
    return "(" + " OR ".join(clauses) + ")"


def current(view: MemoryView, alias: str, params: list[Any]) -> str:
    """Rows of `alias` no row the view sees supersedes."""
    seen = visible(view, "s", params)
    return (
        f"NOT EXISTS (SELECT 1 FROM memory_rows s WHERE s.ns = {alias}.ns "
        f"AND s.supersedes = {alias}.id AND {seen})"
    )


def in_list(column: str, values: Sequence[Any], params: list[Any]) -> str:
    params += list(values)
    return f"{column} IN ({', '.join('?' * len(values))})" if values else "1 = 0"


class SqlStore:
    """The shared part of the SQL stores (one connection, used by one thread at a time)."""

    def __init__(self) -> None:
        self._lock = threading.RLock()

    # What a store provides.
    def _execute(self, sql: str, params: Sequence[Any] = ()) -> list[tuple[Any, ...]]:
        raise NotImplementedError

    @contextmanager
    def _transaction(self) -> Iterator[None]:
        raise NotImplementedError
        yield

    def _lock_head(self, ns: str) -> int:
        """In a write transaction: lock the namespace's head and return its revision."""
        raise NotImplementedError

    def _unindex(self, tenant: str, owner: str) -> None:
        """Drop the owner's rows from the full-text index, before they are deleted."""

    def _scrub(self) -> None:
        """After a purge: leave no deleted body readable in the database's files."""

    def _insert(self, ns: str, row: NewRow, params: list[Any]) -> None:
        """Insert one row (`params`: INSERTED) and index it for search."""
        raise NotImplementedError

    # The protocol.
    def current(
        self,
        view: MemoryView,
        namespaces: Sequence[Namespace],
        *,
        kinds: Sequence[str] | None = None,
        path: str | None = None,
        prefix: str | None = None,
        ids: Sequence[str] | None = None,
        limit: int = 1000,
    ) -> list[Row]:
        params: list[Any] = []
        where = [in_list("a.ns", [n.key for n in namespaces], params)]
        if kinds is not None:
            where.append(in_list("a.kind", kinds, params))
        if path is not None:
            where.append("a.path = ?")
            params.append(path)
        if prefix is not None:
            where.append("substr(a.path, 1, ?) = ?")
            params += [len(prefix), prefix]
        if ids is not None:
            where.append(in_list("a.id", ids, params))
        where += [visible(view, "a", params), current(view, "a", params)]
        params.append(limit)
        clauses = " AND ".join(where)
        sql = f"SELECT {COLUMNS} FROM memory_rows a WHERE {clauses} ORDER BY a.revision DESC LIMIT ?"
        with self._lock:
            return [to_row(r) for r in self._execute(sql, params)]

    def write(
        self,
        ns: Namespace,
        view: MemoryView,
        key: str,
        digest: str,
        provenance: Provenance,
        plan: Callable[[Reader], Plan],
    ) -> Receipt:
        receipt_key = f"{ns.key}|{key}"
        with self._lock, self._transaction():
            head = self._lock_head(ns.key)
            found = self._execute(
                "SELECT digest, ids, revision, answer FROM memory_receipts WHERE key = ?", [receipt_key]
            )
            if found:
                stored, ids, revision, answer = found[0]
                if stored != digest:
                    raise MemoryStoreError(f"write {key!r} was made already with other arguments")
                return Receipt(key, json.loads(ids), revision, answer, replayed=True)
            planned = plan(self)
            if planned.error is not None:
                raise MemoryStoreError(planned.error)
            ids = []
            now = time.time()
            for row in planned.rows:
                head += 1
                ids.append(f"m{head}")
                p = provenance
                self._insert(ns.key, row,
                    [ns.key, f"m{head}", head, view.branch, row.kind, row.body, row.about, row.path,
                     row.supersedes, p.session, p.turn, p.turn_seq, p.call, p.model, p.source, now,
                     ns.tenant, ns.owner]
                )  # fmt: skip
            answer = planned.answer.replace("{id}", ids[0] if ids else "")
            self._execute("UPDATE memory_heads SET revision = ? WHERE ns = ?", [head, ns.key])
            self._execute(
                "INSERT INTO memory_receipts (key, ns, tenant, owner, digest, ids, revision, answer, "
                "created) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)",
                [receipt_key, ns.key, ns.tenant, ns.owner, digest, json.dumps(ids), head, answer, now],
            )
            return Receipt(key, ids, head, answer)

    def search(
        self, view: MemoryView, namespaces: Sequence[Namespace], terms: list[str], k: int
    ) -> list[Row]:
        """The index's best `window` matches first, then which of them this view sees as current:
        checking that for every match cost 3-4 times as much (thousands of matches of a common word
        in a 10,000-row namespace). A window that current rows do not fill doubles."""
        if not terms or not namespaces:
            return []
        window = WINDOW * k
        while True:
            sql, params = self._search_sql(view, namespaces, terms, window, k)
            with self._lock:
                rows = [to_row(r) for r in self._execute(sql, params)]
                if len(rows) == k or window >= MAX_WINDOW or self._matches(namespaces, terms) <= window:
                    return rows
            window *= 2

    def _search_sql(
        self, view: MemoryView, namespaces: Sequence[Namespace], terms: list[str], window: int, k: int
    ) -> tuple[str, list[Any]]:
        """The statement of one search: the best `window` matches, then up to `k` current ones."""
        raise NotImplementedError

    def _matches(self, namespaces: Sequence[Namespace], terms: list[str]) -> int:
        """How many rows of the namespaces match any of the terms (current or not)."""
        raise NotImplementedError

    def history(self, namespaces: Sequence[Namespace], *, limit: int = 1000) -> list[Row]:
        params: list[Any] = []
        where = in_list("a.ns", [n.key for n in namespaces], params)
        params.append(limit)
        sql = f"SELECT {COLUMNS} FROM memory_rows a WHERE {where} ORDER BY a.revision DESC LIMIT ?"
        with self._lock:
            return [to_row(r) for r in self._execute(sql, params)]

    def revisions(self, namespaces: Sequence[Namespace]) -> dict[str, int]:
        params: list[Any] = []
        where = in_list("ns", [n.key for n in namespaces], params)
        with self._lock:
            found = dict(self._execute(f"SELECT ns, revision FROM memory_heads WHERE {where}", params))
        return {n.key: int(found.get(n.key, 0)) for n in namespaces}

    def namespaces(self, tenant: str, owner: str | None = None) -> list[Namespace]:
        sql, params = "SELECT DISTINCT ns FROM memory_rows WHERE tenant = ?", [tenant]
        if owner is not None:
            sql += " AND owner = ?"
            params.append(owner)
        with self._lock:
            return sorted((Namespace.parse(r[0]) for r in self._execute(sql, params)), key=lambda n: n.key)

    def purge(self, tenant: str, owner: str) -> int:
        owner_prefix(tenant, owner)  # validates both
        with self._lock, self._transaction():
            self._unindex(tenant, owner)
            count = self._execute(
                "SELECT count(*) FROM memory_rows WHERE tenant = ? AND owner = ?", [tenant, owner]
            )
            self._execute("DELETE FROM memory_rows WHERE tenant = ? AND owner = ?", [tenant, owner])
            self._execute("DELETE FROM memory_receipts WHERE tenant = ? AND owner = ?", [tenant, owner])
        with self._lock:
            self._scrub()
        return int(count[0][0])


def to_row(r: Sequence[Any]) -> Row:
    ns, id_, revision, branch, kind, body, about, path, supersedes = r[:9]
    writer, turn, turn_seq, call, model, source, created = r[9:16]
    provenance = Provenance(
        session=writer, turn=turn, turn_seq=turn_seq, call=call, model=model, source=source
    )
    score = float(r[16]) if len(r) > 16 else 0.0
    return Row(ns, id_, revision, branch, kind, body, about, path, supersedes, provenance, created, score)
