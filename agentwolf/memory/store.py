"""The store protocol every memory store implements and the rows it keeps.

Rows are append-only: a correction, an edit of a file or a `forget` is a new row that supersedes an
older one, and each row takes the next revision of its namespace. A write carries an idempotency
key; the store keeps a receipt per key in the same transaction as the rows, so a retried or replayed
write finds the receipt and adds nothing. Reads take a `MemoryView`: what a fork sees of memory."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Protocol

from agentwolf.memory.namespaces import Namespace
from agentwolf.workflows.memory_tools import MemoryView, Provenance

FILE = "file"
"""The kind of a file of the `/memories` tree."""
PENDING = "pending"
"""The kind of an extracted memory waiting for review (`memory.extract: review`): listed, never searched."""
TOMBSTONE = "forget"
"""The kind of a row that ends another (a `forget`, a deleted or renamed file): its body is the reason."""


class MemoryStoreError(RuntimeError):
    """The store could not do what was asked (a conflict, a missing row, an unreachable database)."""


@dataclass(frozen=True)
class NewRow:
    kind: str
    body: str
    about: str = ""
    path: str | None = None
    supersedes: str | None = None


@dataclass(frozen=True)
class Row:
    ns: str
    id: str
    revision: int
    branch: str
    kind: str
    body: str
    about: str
    path: str | None
    supersedes: str | None
    provenance: Provenance
    created: float
    score: float = 0.0

    @property
    def namespace(self) -> Namespace:
        return Namespace.parse(self.ns)


@dataclass(frozen=True)
class Receipt:
    """What a write did: the ids it added, the namespace's revision after it, the answer given, and
    whether an earlier attempt had done it already (`replayed`)."""

    key: str
    ids: list[str]
    revision: int
    answer: str
    replayed: bool = False


@dataclass(frozen=True)
class Plan:
    """What a write adds (decided inside its transaction, from what is current then) and what it
    answers; an empty plan with `error` set refuses the write (nothing is recorded)."""

    rows: list[NewRow] = field(default_factory=list)
    answer: str = ""
    error: str | None = None


class Reader(Protocol):
    """Reads inside a write's transaction, or on their own."""

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
    ) -> list[Row]: ...


class MemoryStore(Reader, Protocol):
    def write(
        self,
        ns: Namespace,
        view: MemoryView,
        key: str,
        digest: str,
        provenance: Provenance,
        plan: Callable[[Reader], Plan],
    ) -> Receipt:
        """Run `plan` and add its rows under `key`, once: a key already written returns its receipt
        (`replayed`), or refuses when `digest` (of the call's arguments) differs."""
        ...

    def search(
        self, view: MemoryView, namespaces: Sequence[Namespace], terms: list[str], k: int
    ) -> list[Row]:
        """Current records matching any of `terms`, best first (lexical score, higher is better)."""
        ...

    def history(self, namespaces: Sequence[Namespace], *, limit: int = 1000) -> list[Row]:
        """Every row of the namespaces (every branch, superseded ones too), newest first."""
        ...

    def revisions(self, namespaces: Sequence[Namespace]) -> dict[str, int]: ...

    def namespaces(self, tenant: str, owner: str | None = None) -> list[Namespace]: ...

    def purge(self, tenant: str, owner: str) -> int:
        """Delete every row and receipt of the owner's namespaces (bodies included): the rows deleted."""
        ...

    def close(self) -> None: ...
