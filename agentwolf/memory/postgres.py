"""The fleet's memory store: PostgreSQL through psycopg 3, records searched by a `tsvector` column
(English stemming of namespace-prefixed words, ranking.ns_words; GIN index). A write locks its
namespace's head row (`FOR UPDATE`), so workers on any host serialize per namespace and never per
tenant. Vectors (pgvector) are not used yet."""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from typing import Any

from agentwolf.memory.namespaces import Namespace
from agentwolf.memory.ranking import ns_words
from agentwolf.memory.sql import COLUMNS, INSERTED, PLACES, SqlStore, current, in_list, visible
from agentwolf.memory.store import TOMBSTONE, MemoryStoreError, NewRow
from agentwolf.workflows.memory_tools import MemoryView

SCHEMA = """
CREATE TABLE IF NOT EXISTS memory_rows (
    seq BIGSERIAL PRIMARY KEY,
    ns TEXT NOT NULL, id TEXT NOT NULL, revision BIGINT NOT NULL, branch TEXT NOT NULL,
    kind TEXT NOT NULL, body TEXT NOT NULL, about TEXT NOT NULL, path TEXT, supersedes TEXT,
    writer TEXT NOT NULL, turn TEXT NOT NULL, turn_seq INTEGER NOT NULL, call TEXT NOT NULL,
    model TEXT NOT NULL, source TEXT NOT NULL, created DOUBLE PRECISION NOT NULL,
    tenant TEXT NOT NULL, owner TEXT NOT NULL,
    tsv tsvector,
    UNIQUE (ns, id)
);
CREATE INDEX IF NOT EXISTS memory_rows_supersedes ON memory_rows (ns, supersedes);
CREATE INDEX IF NOT EXISTS memory_rows_path ON memory_rows (ns, path);
CREATE INDEX IF NOT EXISTS memory_rows_owner ON memory_rows (tenant, owner);
CREATE INDEX IF NOT EXISTS memory_rows_tsv ON memory_rows USING GIN (tsv);
CREATE TABLE IF NOT EXISTS memory_heads (ns TEXT PRIMARY KEY, revision BIGINT NOT NULL);
CREATE TABLE IF NOT EXISTS memory_receipts (
    key TEXT PRIMARY KEY, ns TEXT NOT NULL, tenant TEXT NOT NULL, owner TEXT NOT NULL,
    digest TEXT NOT NULL, ids TEXT NOT NULL, revision BIGINT NOT NULL, answer TEXT NOT NULL,
    created DOUBLE PRECISION NOT NULL
);
CREATE INDEX IF NOT EXISTS memory_receipts_owner ON memory_receipts (tenant, owner);
"""
_SCHEMA_LOCK = 7_436_211  # an advisory lock id: two workers creating the tables at once wait in turn


class PostgresStore(SqlStore):
    def __init__(self, url: str) -> None:
        super().__init__()
        try:
            import psycopg
        except ImportError:
            raise MemoryStoreError(
                "a postgresql:// memory store needs psycopg: pip install 'agentwolf[postgres]'"
            ) from None
        try:
            self._db = psycopg.connect(url, autocommit=True)
        except psycopg.Error as exc:
            raise MemoryStoreError(f"memory store unreachable: {exc}") from None
        with self._db.transaction():
            self._db.execute(f"SELECT pg_advisory_xact_lock({_SCHEMA_LOCK})")
            self._db.execute(SCHEMA)

    def _execute(self, sql: str, params: Sequence[Any] = ()) -> list[tuple[Any, ...]]:
        cursor = self._db.execute(sql.replace("?", "%s"), list(params))
        return cursor.fetchall() if cursor.description else []

    @contextmanager
    def _transaction(self) -> Iterator[None]:
        with self._db.transaction():
            yield

    def _lock_head(self, ns: str) -> int:
        self._execute("INSERT INTO memory_heads (ns, revision) VALUES (?, 0) ON CONFLICT DO NOTHING", [ns])
        return int(self._execute("SELECT revision FROM memory_heads WHERE ns = ? FOR UPDATE", [ns])[0][0])

    def _scrub(self) -> None:
        self._db.execute("VACUUM memory_rows, memory_receipts")  # dead tuples' bodies

    def _insert(self, ns: str, row: NewRow, params: list[Any]) -> None:
        about, body = ("", "") if row.kind == TOMBSTONE else (ns_words(ns, row.about), ns_words(ns, row.body))
        tsv = "setweight(to_tsvector('english', ?), 'B') || setweight(to_tsvector('english', ?), 'A')"
        self._execute(
            f"INSERT INTO memory_rows ({INSERTED}, tsv) VALUES ({PLACES}, {tsv})", [*params, about, body]
        )

    def _search_sql(
        self, view: MemoryView, namespaces: Sequence[Namespace], terms: list[str], window: int, k: int
    ) -> tuple[str, list[Any]]:
        params: list[Any] = [" | ".join(ns_words(n.key, t) for n in namespaces for t in terms)]
        where = [
            in_list("a.ns", [n.key for n in namespaces], params),
            "a.kind NOT IN ('file', 'forget', 'pending')",
        ]
        where += ["a.tsv @@ q", visible(view, "a", params)]
        params.append(window)
        current_ = current(view, "a", params)
        params.append(k)
        sql = (
            "WITH hits AS MATERIALIZED (SELECT a.seq, ts_rank(a.tsv, q) AS score "
            f"FROM memory_rows a, to_tsquery('english', ?) q WHERE {' AND '.join(where)} "
            "ORDER BY score DESC LIMIT ?) "
            f"SELECT {', '.join('a.' + c for c in COLUMNS.split(', '))}, hits.score "
            f"FROM hits JOIN memory_rows a ON a.seq = hits.seq "
            f"WHERE {current_} ORDER BY hits.score DESC LIMIT ?"
        )
        return sql, params

    def _matches(self, namespaces: Sequence[Namespace], terms: list[str]) -> int:
        query = " | ".join(ns_words(n.key, t) for n in namespaces for t in terms)
        params: list[Any] = [query]
        where = in_list("ns", [n.key for n in namespaces], params)
        sql = f"SELECT count(*) FROM memory_rows, to_tsquery('english', ?) q WHERE tsv @@ q AND {where}"
        return int(self._execute(sql, params)[0][0])

    def close(self) -> None:
        with self._lock:
            self._db.close()
