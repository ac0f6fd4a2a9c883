"""The embedded memory store: one SQLite file (stdlib `sqlite3`, WAL), records searched with FTS5's
BM25. A namespace's head row is taken by `BEGIN IMMEDIATE`, which several worker processes on one
host serialize on."""

from __future__ import annotations

import sqlite3
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from agentwolf.memory.namespaces import Namespace
from agentwolf.memory.ranking import ns_words
from agentwolf.memory.sql import COLUMNS, INSERTED, PLACES, SqlStore, current, in_list, visible
from agentwolf.memory.store import TOMBSTONE, NewRow
from agentwolf.workflows.memory_tools import MemoryView

SCHEMA = """
CREATE TABLE IF NOT EXISTS memory_rows (
    seq INTEGER PRIMARY KEY AUTOINCREMENT,
    ns TEXT NOT NULL, id TEXT NOT NULL, revision INTEGER NOT NULL, branch TEXT NOT NULL,
    kind TEXT NOT NULL, body TEXT NOT NULL, about TEXT NOT NULL, path TEXT, supersedes TEXT,
    writer TEXT NOT NULL, turn TEXT NOT NULL, turn_seq INTEGER NOT NULL, call TEXT NOT NULL,
    model TEXT NOT NULL, source TEXT NOT NULL, created REAL NOT NULL,
    tenant TEXT NOT NULL, owner TEXT NOT NULL,
    UNIQUE (ns, id)
);
CREATE INDEX IF NOT EXISTS memory_rows_supersedes ON memory_rows (ns, supersedes);
CREATE INDEX IF NOT EXISTS memory_rows_path ON memory_rows (ns, path);
CREATE INDEX IF NOT EXISTS memory_rows_owner ON memory_rows (tenant, owner);
CREATE TABLE IF NOT EXISTS memory_heads (ns TEXT PRIMARY KEY, revision INTEGER NOT NULL);
CREATE TABLE IF NOT EXISTS memory_receipts (
    key TEXT PRIMARY KEY, ns TEXT NOT NULL, tenant TEXT NOT NULL, owner TEXT NOT NULL,
    digest TEXT NOT NULL, ids TEXT NOT NULL, revision INTEGER NOT NULL, answer TEXT NOT NULL,
    created REAL NOT NULL
);
CREATE INDEX IF NOT EXISTS memory_receipts_owner ON memory_receipts (tenant, owner);
CREATE VIRTUAL TABLE IF NOT EXISTS memory_fts USING fts5 (about, body, tokenize = 'porter unicode61');
"""


class SqliteStore(SqlStore):
    def __init__(self, path: Path) -> None:
        super().__init__()
        path.parent.mkdir(parents=True, exist_ok=True)
        self.path = path
        self._db = sqlite3.connect(path, check_same_thread=False, isolation_level=None, timeout=30)
        self._db.execute("PRAGMA journal_mode = WAL")
        self._db.execute("PRAGMA synchronous = NORMAL")
        self._db.execute("PRAGMA secure_delete = ON")  # a purge overwrites what it deletes
        self._db.executescript(SCHEMA)

    def _execute(self, sql: str, params: Sequence[Any] = ()) -> list[tuple[Any, ...]]:
        return self._db.execute(sql, params).fetchall()

    @contextmanager
    def _transaction(self) -> Iterator[None]:
        self._db.execute("BEGIN IMMEDIATE")
        try:
            yield
        except BaseException:
            self._db.execute("ROLLBACK")
            raise
        self._db.execute("COMMIT")

    def _lock_head(self, ns: str) -> int:
        self._execute("INSERT OR IGNORE INTO memory_heads (ns, revision) VALUES (?, 0)", [ns])
        return int(self._execute("SELECT revision FROM memory_heads WHERE ns = ?", [ns])[0][0])

    def _scrub(self) -> None:
        self._db.execute("PRAGMA wal_checkpoint(TRUNCATE)")  # the log's copies of deleted pages too

    def _insert(self, ns: str, row: NewRow, params: list[Any]) -> None:
        cursor = self._db.execute(f"INSERT INTO memory_rows ({INSERTED}) VALUES ({PLACES})", params)
        if row.kind != TOMBSTONE:
            self._execute(
                "INSERT INTO memory_fts (rowid, about, body) VALUES (?, ?, ?)",
                [cursor.lastrowid, ns_words(ns, row.about), ns_words(ns, row.body)],
            )

    def _unindex(self, tenant: str, owner: str) -> None:
        self._execute(
            "DELETE FROM memory_fts WHERE rowid IN "
            "(SELECT seq FROM memory_rows WHERE tenant = ? AND owner = ?)",
            [tenant, owner],
        )

    def _search_sql(
        self, view: MemoryView, namespaces: Sequence[Namespace], terms: list[str], window: int, k: int
    ) -> tuple[str, list[Any]]:
        match = " OR ".join(f'"{ns_words(n.key, t)}"' for n in namespaces for t in terms)
        params: list[Any] = [match, window]
        where = [
            in_list("a.ns", [n.key for n in namespaces], params),
            "a.kind NOT IN ('file', 'forget', 'pending')",
        ]
        where += [visible(view, "a", params), current(view, "a", params)]
        params.append(k)
        sql = (
            "WITH hits AS (SELECT rowid, -bm25(memory_fts, 0.5, 1.0) AS score FROM memory_fts "
            "WHERE memory_fts MATCH ? ORDER BY bm25(memory_fts, 0.5, 1.0) LIMIT ?) "
            f"SELECT {', '.join('a.' + c for c in COLUMNS.split(', '))}, hits.score "
            f"FROM hits JOIN memory_rows a ON a.seq = hits.rowid "
            f"WHERE {' AND '.join(where)} ORDER BY hits.score DESC LIMIT ?"
        )
        return sql, params

    def _matches(self, namespaces: Sequence[Namespace], terms: list[str]) -> int:
        match = " OR ".join(f'"{ns_words(n.key, t)}"' for n in namespaces for t in terms)
        return int(self._execute("SELECT count(*) FROM memory_fts WHERE memory_fts MATCH ?", [match])[0][0])

    def close(self) -> None:
        with self._lock:
            self._db.close()
