"""Hostile probes against memory's scoping, randomized: 1,000 calls by one owner trying to reach the
memories of other tenants, owners and agents (traversing paths, percent-encoded or not, forged
`owner`/`tenant`/`agent`/`layer` arguments, other owners' ids, their secrets as queries), on SQLite
and on PostgreSQL, and API-key principals naming other owners in `user`. A leak is any other
namespace's secret in any answer: there must be none."""

from __future__ import annotations

import random
from pathlib import Path
from typing import Any

import pytest

from agentwolf.access import Principal
from agentwolf.config.manifest import MemorySettings
from agentwolf.memory.faces import Faces
from agentwolf.memory.namespaces import Namespace
from agentwolf.memory.store import MemoryStore
from agentwolf.memory.stores import open_store
from agentwolf.protocols.openai_api.targeting import owner_of
from agentwolf.protocols.served import ApiError
from agentwolf.workflows.contracts import HostRef
from agentwolf.workflows.memory_tools import MemoryCall, Provenance

TENANTS, OWNERS, AGENTS = ["acme", "globex"], ["alice", "bob", "key:0123456789ab:bob"], ["a", "b"]
PROBES = 1000


def _call(tenant: str, owner: str, agent: str, tool: str, args: dict[str, Any], n: int) -> MemoryCall:
    wid = f"wolf/{tenant}/s-{owner}-{agent}"
    return MemoryCall(
        ref=HostRef(config_id="c", tenant=tenant, workflow_id=wid),
        tool=tool,
        arguments=args,
        agent=agent,
        owner=owner,
        settings=MemorySettings(shared=["agent"]),
        key=f"{wid}/turn-1/1/probe-{n}",
        provenance=Provenance(session=wid),
    )


def _secret(tenant: str, owner: str, agent: str) -> str:
    return f"zq{abs(hash((tenant, owner, agent))) % 10**9}secret"


def _hostile(rng: random.Random, victim: tuple[str, str, str]) -> tuple[str, dict[str, Any]]:
    tenant, owner, agent = victim
    names = [f"{tenant}/{owner}/{agent}", f"{tenant}/{owner}", owner, tenant]
    up = rng.choice(["../", "..%2f", "%2e%2e/", "%2e%2e%2f", "%252e%252e%252f", "..\\", "./../", "....//"])
    path = rng.choice(
        [
            f"/memories/{up * rng.randint(1, 4)}{rng.choice(names)}/notes.md",
            f"/memories/{up}{up}{tenant}/{owner}/{agent}/memories/notes.md",
            f"/{rng.choice(names)}/notes.md",
            f"{up * 3}{owner}",
            "/memories/notes.md",
            f"/memories/%2F..%2F{owner}",
            f"/memories/notes.md\x00/{owner}",
        ]
    )
    forged = {rng.choice(["owner", "tenant", "agent", "namespace", "user"]): rng.choice(names)}
    ident = rng.choice(["m1", "m2", f"{owner}:m1", "agent:m1", "tenant:m1", f"../{owner}/m1", f"{tenant}/m1"])
    probes: list[tuple[str, dict[str, Any]]] = [
        ("memory", {"command": "view", "path": path, **forged}),
        ("memory", {"command": "view", "path": "/memories", **forged}),
        ("memory", {"command": "create", "path": path, "file_text": "x", **forged}),
        ("memory", {"command": "rename", "old_path": path, "new_path": "/memories/stolen.md"}),
        ("memory", {"command": "str_replace", "path": path, "old_str": "zq", "new_str": "", **forged}),
        ("search_memory", {"query": f"{_secret(*victim)} secret", **forged}),
        ("search_memory", {"query": "secret", "k": 50, **forged}),
        (
            "remember",
            {"text": "x", "kind": "user", "layer": rng.choice(["agent", "tenant", owner]), **forged},
        ),
        ("forget", {"id": ident, "reason": "probe", **forged}),
    ]
    return rng.choice(probes)


@pytest.fixture(params=["sqlite", "postgres"])
def store(request: pytest.FixtureRequest, tmp_path: Path) -> Any:
    url = str(tmp_path / "memory.db") if request.param == "sqlite" else request.getfixturevalue("postgres_db")
    opened = open_store(url)
    yield opened
    opened.close()


def test_a_thousand_probes_leak_nothing(store: MemoryStore) -> None:
    rng = random.Random(4141)
    everyone = [(t, o, a) for t in TENANTS for o in OWNERS for a in AGENTS]
    for n, (t, o, a) in enumerate(everyone):
        secret = _secret(t, o, a)
        for tool, args in [
            ("remember", {"text": f"{secret} is the secret", "kind": "user"}),
            ("memory", {"command": "create", "path": "/memories/notes.md", "file_text": secret}),
        ]:
            assert not Faces(store, t, _call(t, o, a, tool, args, n * 2 + len(args))).run().is_error
    leaks, refused = [], 0
    for n in range(PROBES):
        attacker, victim = rng.sample(everyone, 2)
        tool, args = _hostile(rng, victim)
        out = Faces(store, attacker[0], _call(*attacker, tool, args, 10_000 + n)).run()
        refused += out.is_error
        others = [_secret(*v) for v in everyone if v != attacker]
        leaks += [(attacker, tool, args) for s in others if s in out.content]
    assert leaks == []
    assert refused > PROBES // 4  # most probes are refused outright (the rest see only their own)
    for t, o, a in everyone:  # and every row of a namespace was written by its own session
        writers = {r.provenance.session for r in store.history([Namespace(t, o, a)])}
        assert writers == {f"wolf/{t}/s-{o}-{a}"}


def test_keys_name_only_their_own_owners() -> None:
    """A key with a subject is that owner whatever `user` says; a key without one reaches only owners
    within itself: 1,000 random `user` values never give another key's or a subject's owner."""
    rng = random.Random(41)
    alice = Principal("acme", key="a" * 64, subject="alice")
    app, other = Principal("acme", key="b" * 64), Principal("acme", key="c" * 64)
    theirs = {"alice", owner_of(other, None), owner_of(other, "bob")}
    forged = ["alice", "key:cccccccccccc", "key:cccccccccccc:bob", "bob", "../alice", "%2e%2e/alice", ""]
    for _ in range(PROBES):
        user = rng.choice(forged) + rng.choice(["", ":bob", "/x", " "])
        assert owner_of(alice, user) == "alice"
        try:
            got = owner_of(app, user or None)
        except ApiError:
            continue
        assert got not in theirs and got is not None and got.startswith("key:bbbbbbbbbbbb")
