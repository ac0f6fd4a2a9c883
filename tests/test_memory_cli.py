"""`wolf memory ...` on a real SQLite file: list, show a correction chain, search, forget, export and
import, purge (no body left in the database's files)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from agentwolf.memory import admin
from agentwolf.memory.namespaces import Namespace
from agentwolf.memory.store import NewRow, Plan
from agentwolf.memory.stores import open_store
from agentwolf.workflows.memory_tools import MemoryView, Provenance

WOLF = str(Path(sys.executable).parent / "wolf")
NS = Namespace("default", "alice", "a")


def _wolf(db: Path, *args: str, stdin: str | None = None) -> str:
    env = {**os.environ, "WOLF_MEMORY_STORE": f"sqlite:///{db}", "NO_COLOR": "1"}
    done = subprocess.run(
        [WOLF, "memory", *args], capture_output=True, text=True, env=env, input=stdin, timeout=60
    )
    assert done.returncode == 0, done.stderr
    return done.stdout


def _seed(db: Path) -> None:
    store = open_store(str(db))
    for n, (body, supersedes) in enumerate([("Alice drinks tea", None), ("Alice drinks green tea", "m1")]):
        provenance = Provenance(session="wolf/default/s1", turn=f"turn-{n + 1}", source="user_stated")
        row = NewRow("user", body, "Alice", supersedes=supersedes)
        store.write(NS, MemoryView(), f"k{n}", "d", provenance, lambda _r, row=row: Plan([row], "ok"))
    other = Namespace("default", "bob", "a")
    store.write(
        other, MemoryView(), "k", "d", Provenance(), lambda _r: Plan([NewRow("user", "Bob's body")], "ok")
    )
    store.close()


def test_the_memory_verbs(tmp_path: Path) -> None:
    db = tmp_path / "memory.db"
    _seed(db)
    listed = _wolf(db, "ls", "--user", "alice")
    assert "green tea" in listed and "Alice drinks tea\n" not in listed and "Bob" not in listed
    chain = _wolf(db, "show", "m2", "--user", "alice", "--agent", "a")
    assert "m1" in chain and "m2" in chain and "turn-1" in chain  # the correction and what it corrected
    assert "green tea" in _wolf(db, "search", "what does alice drink", "--user", "alice")
    exported = _wolf(db, "export", "--user", "alice")
    assert [json.loads(line)["id"] for line in exported.splitlines()] == ["m2", "m1"]
    assert "imported 1 rows" in _wolf(db, "import", "-", "--user", "carol", "--agent", "a", stdin=exported)
    assert "imported 0 rows" in _wolf(db, "import", "-", "--user", "carol", "--agent", "a", stdin=exported)
    assert (
        _wolf(db, "forget", "m2", "--user", "alice", "--agent", "a", "--reason", "asked").strip()
        == "forgot m2"
    )
    assert "green tea" not in _wolf(db, "ls", "--user", "alice")
    store = open_store(str(db))
    private = NewRow("file", "zq-private-77 " * 50, path="/memories/private.md")
    store.write(NS, MemoryView(), "k9", "d", Provenance(), lambda _r: Plan([private], "ok"))
    store.close()
    assert _wolf(db, "purge", "--user", "alice", "--yes").strip() == "deleted 4 rows of 'alice'"
    assert _wolf(db, "export", "--user", "alice") == ""
    raw = b"".join(p.read_bytes() for p in tmp_path.iterdir() if p.name.startswith("memory.db"))
    assert b"zq-private-77" not in raw and b"Bob's body" in raw  # not even in free pages or the log
    store = open_store(str(db))
    assert [r.body for r in admin.current(store, [Namespace("default", "carol", "a")])] == [
        "Alice drinks green tea"
    ]
    store.close()


def test_a_pending_memory_is_listed_and_approved(tmp_path: Path) -> None:
    db = tmp_path / "memory.db"
    store = open_store(str(db))
    row = NewRow("pending", "Alice is left-handed")
    store.write(NS, MemoryView(), "p", "d", Provenance(source="extracted"), lambda _r: Plan([row], "ok"))
    store.close()
    assert "pending" in _wolf(db, "ls", "--user", "alice")
    assert "left-handed" not in _wolf(db, "search", "left-handed", "--user", "alice")  # not until approved
    assert _wolf(db, "approve", "m1", "--user", "alice", "--agent", "a").strip() == "approved m1 as m2"
    assert "left-handed" in _wolf(db, "search", "left-handed", "--user", "alice")
