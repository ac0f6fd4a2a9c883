"""Which store a URL names (`sqlite:///...`, `postgresql://...`), and the stores a worker keeps open."""

from __future__ import annotations

import os
import threading
from pathlib import Path

from agentwolf.memory.store import MemoryStore

STORE_ENV = "WOLF_MEMORY_STORE"


def default_store() -> str:
    """`WOLF_MEMORY_STORE`, else a SQLite file in the data dir."""
    from agentwolf.paths import data_dir

    return os.environ.get(STORE_ENV) or f"sqlite:///{data_dir() / 'memory.db'}"


def open_store(url: str) -> MemoryStore:
    """The store `url` names: `sqlite:///path` (or a bare path) or `postgresql://...`."""
    if url.startswith(("postgresql://", "postgres://")):
        from agentwolf.memory.postgres import PostgresStore

        return PostgresStore(url)
    path = url.removeprefix("sqlite://") if url.startswith("sqlite://") else url
    from agentwolf.memory.sqlite import SqliteStore

    return SqliteStore(Path(path))


class Stores:
    """The stores a worker has opened, by URL (one connection each), closed with the worker."""

    def __init__(self) -> None:
        self._open: dict[str, MemoryStore] = {}
        self._lock = threading.Lock()

    def get(self, url: str | None) -> MemoryStore:
        """The store `url` names (None: the default one), opened on first use (blocking: in a thread)."""
        url = url or default_store()
        with self._lock:
            if url not in self._open:
                self._open[url] = open_store(url)
            return self._open[url]

    def close(self) -> None:
        with self._lock:
            stores, self._open = list(self._open.values()), {}
        for store in stores:
            store.close()
