"""The memory stores (a real SQLite file, a real PostgreSQL server) and the faces over them:
receipts, supersession, forks' views, purge."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from agentwolf.config.manifest import MemorySettings
from agentwolf.memory.faces import Faces
from agentwolf.memory.namespaces import Namespace
from agentwolf.memory.store import MemoryStore, MemoryStoreError, NewRow, Plan
from agentwolf.memory.stores import open_store
from agentwolf.workflows.contracts import HostRef
from agentwolf.workflows.memory_tools import MemoryCall, MemoryCut, MemoryView, Provenance


@pytest.fixture(params=["sqlite", "postgres"])
def store(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[MemoryStore]:
    url = str(tmp_path / "memory.db") if request.param == "sqlite" else request.getfixturevalue("postgres_db")
    opened = open_store(url)
    yield opened
    opened.close()


calls = iter(range(1_000_000))


def call(
    tool: str,
    owner: str = "alice",
    *,
    tenant: str = "acme",
    agent: str = "a",
    view: MemoryView | None = None,
    key: str | None = None,
    wid: str = "wolf/acme/s1",
    turn: int = 1,
    settings: MemorySettings | None = None,
    **arguments: Any,
) -> MemoryCall:
    return MemoryCall(
        ref=HostRef(config_id="c", tenant=tenant, workflow_id=wid),
        tool=tool,
        arguments=arguments,
        agent=agent,
        owner=owner,
        settings=settings or MemorySettings(),
        view=view or MemoryView(),
        key=key or f"{wid}/turn-{turn}/1/call-{next(calls)}",
        provenance=Provenance(session=wid, turn=f"turn-{turn}", turn_seq=turn, call="c", model="m"),
    )


def run(store: MemoryStore, memory_call: MemoryCall) -> str:
    out = Faces(store, memory_call.ref.tenant, memory_call).run()
    return ("ERROR " if out.is_error else "") + out.content


def test_a_retried_write_adds_nothing_and_a_reused_key_with_other_arguments_is_refused(
    store: MemoryStore,
) -> None:
    first = call("remember", text="Alice prefers tea", kind="user", key="k1")
    assert run(store, first) == "kept as m1"
    assert run(store, first) == "kept as m1"  # the receipt answers
    assert run(store, call("remember", text="Alice prefers coffee", kind="user", key="k1")).startswith(
        "ERROR"
    )
    ns = Namespace("acme", "alice", "a")
    assert len(store.history([ns])) == 1
    assert store.revisions([ns]) == {ns.key: 1}


def test_corrections_supersede_and_the_old_fact_never_comes_back_as_current(store: MemoryStore) -> None:
    current = run(store, call("remember", text="the deploy day is day 0", kind="project")).split()[-1]
    for n in range(1, 21):
        current = run(
            store, call("remember", text=f"the deploy day is day {n}", kind="project", supersedes=current)
        ).split()[-1]
    found = run(store, call("search_memory", query="deploy day", k=50))
    assert found.count("\n") == 0 and "day 20" in found
    ns = Namespace("acme", "alice", "a")
    assert len(store.history([ns])) == 21  # history keeps every version
    assert run(store, call("remember", text="x", kind="project", supersedes="m1")).startswith("ERROR")
    assert run(store, call("forget", id=current, reason="wrong")) == f"forgot {current}"
    assert run(store, call("search_memory", query="deploy day")) == "no memories match"


def test_the_file_face_follows_the_memory_tool_commands(store: MemoryStore) -> None:
    def m(**args: Any) -> str:
        return run(store, call("memory", **args))

    assert m(command="view", path="/memories").endswith("(empty)")
    assert m(command="create", path="/memories/notes/prefs.md", file_text="tea\nno sugar") == (
        "File created successfully at: /memories/notes/prefs.md"
    )
    assert m(command="str_replace", path="/memories/notes/prefs.md", old_str="tea", new_str="green tea")
    assert m(command="insert", path="/memories/notes/prefs.md", insert_line=0, insert_text="# prefs")
    assert m(command="view", path="/memories/notes/prefs.md").splitlines()[1:] == [
        "     1\t# prefs", "     2\tgreen tea", "     3\tno sugar"
    ]  # fmt: skip
    assert m(command="str_replace", path="/memories/notes/prefs.md", old_str="zzz", new_str="").startswith(
        "ERROR"
    )
    assert m(command="rename", old_path="/memories/notes/prefs.md", new_path="/memories/prefs.md")
    assert "/memories/prefs.md" in m(command="view", path="/memories")
    assert m(command="view", path="/memories/notes/prefs.md").startswith("ERROR")
    assert m(command="delete", path="/memories/prefs.md") == "Deleted /memories/prefs.md"
    assert m(command="view", path="/memories").endswith("(empty)")
    for bad in [
        "/memories/../x",
        "/memories/%2e%2e/x",
        "/etc/passwd",
        "/memories/a\\..\\b",
        "/memories/%252e%252e",
    ]:
        assert m(command="create", path=bad, file_text="x").startswith("ERROR refused path"), bad


def test_a_fork_sees_memory_as_of_its_cut_and_its_writes_stay_its_own(store: MemoryStore) -> None:
    source = "wolf/acme/s1"
    run(store, call("remember", text="before the cut: likes cats", kind="user", wid=source, turn=1))
    run(store, call("remember", text="after the cut: likes dogs", kind="user", wid=source, turn=3))
    ns = Namespace("acme", "alice", "a")
    fork = MemoryView(
        branch="wolf/acme/f1", cuts=[MemoryCut(branch="", revisions={ns.key: 1}, writer=source, after_turn=2)]
    )
    in_fork = run(store, call("search_memory", query="likes", view=fork, wid="wolf/acme/f1"))
    assert "cats" in in_fork and "dogs" not in in_fork
    run(
        store,
        call("remember", text="the fork's own: likes birds", kind="user", view=fork, wid="wolf/acme/f1"),
    )
    assert "birds" in run(store, call("search_memory", query="likes", view=fork, wid="wolf/acme/f1"))
    assert "birds" not in run(store, call("search_memory", query="likes"))
    forget_in_fork = run(store, call("forget", id="m1", reason="fork only", view=fork, wid="wolf/acme/f1"))
    assert forget_in_fork == "forgot m1"
    assert "cats" in run(store, call("search_memory", query="likes"))  # the source keeps it


def test_namespaces_never_meet_and_shared_layers_are_read_only(store: MemoryStore) -> None:
    run(store, call("remember", text="secret of alice", kind="user", owner="alice"))
    run(store, call("remember", text="secret of acme", kind="user", owner="alice", agent="b"))
    run(
        store,
        call(
            "remember",
            text="secret of globex",
            kind="user",
            owner="alice",
            tenant="globex",
            wid="wolf/globex/s",
        ),
    )
    assert run(store, call("search_memory", query="secret", owner="bob")) == "no memories match"
    assert "acme" not in run(store, call("search_memory", query="secret", owner="alice", agent="a")).replace(
        "secret of alice", ""
    )
    shared = MemorySettings(shared=["tenant"])
    assert run(store, call("remember", text="x", kind="user", layer="tenant", settings=shared)).startswith(
        "ERROR"
    )
    writer = MemorySettings(shared=["tenant"], write_shared=["tenant"])
    assert run(
        store,
        call("remember", text="office wifi is wolfnet", kind="reference", layer="tenant", settings=writer),
    )
    assert "[tenant:m1]" in run(store, call("search_memory", query="wifi", owner="bob", settings=shared))
    assert run(store, call("search_memory", query="wifi", owner="bob")) == "no memories match"


def test_purge_deletes_every_body_of_the_owner(store: MemoryStore) -> None:
    run(store, call("remember", text="alice body one", kind="user", owner="alice"))
    run(
        store,
        call("memory", owner="alice", command="create", path="/memories/a.md", file_text="alice body two"),
    )
    run(store, call("remember", text="bob body", kind="user", owner="bob"))
    assert store.purge("acme", "alice") == 2
    assert store.history([Namespace("acme", "alice", "a")]) == []
    assert run(store, call("search_memory", query="body", owner="alice")) == "no memories match"
    assert "bob body" in run(store, call("search_memory", query="body", owner="bob"))
    assert run(store, call("remember", text="alice again", kind="user", owner="alice")) == "kept as m3"


def test_a_plan_that_refuses_writes_nothing(store: MemoryStore) -> None:
    ns = Namespace("acme", "alice", "a")
    with pytest.raises(MemoryStoreError):
        store.write(ns, MemoryView(), "k", "d", Provenance(), lambda reader: Plan(error="no"))
    store.write(ns, MemoryView(), "k", "d", Provenance(), lambda reader: Plan([NewRow("user", "x")], "ok"))
    assert store.revisions([ns]) == {ns.key: 1}


def test_a_current_row_ranked_below_many_superseded_ones_is_found(store: MemoryStore) -> None:
    """The index's best matches are read first (a window), then filtered to current rows: when the
    window holds only superseded rows, it grows until the current one is in it."""
    current = run(store, call("remember", text="deploy deploy deploy deploy on day 0", kind="project"))
    for n in range(1, 12):
        text = "deploy deploy deploy deploy on day" if n < 11 else "we ship on day"
        current = run(
            store, call("remember", text=f"{text} {n}", kind="project", supersedes=current.split()[-1])
        )
    hits = store.search(MemoryView(), [Namespace("acme", "alice", "a")], ["deploy", "day"], 1)
    assert [h.body for h in hits] == ["we ship on day 11"]
