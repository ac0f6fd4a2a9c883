"""Background extraction (`memory.extract`) on a real dev server: at close the session asks its model
(background priority) for facts about the user; echoed templates and duplicates are dropped, the rest
kept with source `extracted`, once under the pass's key; `review` keeps them pending, unsearched."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from pydantic_ai.messages import ModelRequest, ModelResponse

from agentwolf.memory import admin, extraction
from agentwolf.memory.namespaces import Namespace
from agentwolf.memory.store import PENDING
from agentwolf.memory.stores import open_store
from agentwolf.workflows.memory_tools import MemoryView
from agentwolf.workflows.types import workflow_id
from tests.conftest import make_manifest, record_history, wait_for
from tests.support.models import Script, text
from tests.support.polls import idle

RULE = "Always answer in the formal register of a butler"
FACT = "The user is vegetarian"
ALICE = Namespace("default", "alice", "a")


def _answer(script: Script) -> ModelResponse:
    """The extraction pass gets the fact, an echo of the instructions and one of a repeated line."""
    first = script.requests[-1][0]
    if isinstance(first, ModelRequest) and first.instructions == extraction.INSTRUCTIONS:
        found = [
            {"text": FACT, "kind": "user", "about": "diet", "evidence": [1]},
            {"text": f"The user wants me to {RULE.lower()}", "evidence": [1]},
            {"text": "Thanks for writing to the help desk", "evidence": [2, 4]},
        ]
        return text(json.dumps({"memories": found}))
    return text("Very good.\nThanks for writing to the help desk!")


def _manifest(db: Path, extract: str) -> Any:
    return make_manifest(
        {"memory": {"extract": extract}, "capabilities": [], "instructions": f"You are a helper.\n{RULE}."},
        memory={"store": f"sqlite:///{db}"},
    )


def test_echoes_of_templates_and_repeated_lines_are_refused():
    lines = extraction.template_lines(
        [f"Intro.\n{RULE}."], ["user: hi", "a: Regards, the desk team", "a: Regards, the desk team"]
    )
    assert extraction.echoes(RULE.upper(), lines)  # contained in an instruction line
    assert extraction.echoes(f"User asked: {RULE}.", lines)  # contains one
    assert extraction.echoes("regards,  the desk team", lines)  # a line repeated in two messages
    assert not extraction.echoes(FACT, lines)
    assert not extraction.echoes("Intro.", lines)  # short lines are not compared


async def _session(wolf: Any, manifest: Any, script: Script) -> str:
    sid = await wolf.start_session("a", manifest, owner="alice")
    await wolf.prompt(sid, "I am vegetarian, what should I cook?")
    await wait_for(lambda: idle(wolf, sid, 1))
    await wolf.prompt(sid, "And for dessert?")
    await wait_for(lambda: idle(wolf, sid, 2))
    await wolf.close(sid)
    await wolf.result(sid)
    return sid


async def test_a_closing_session_keeps_the_fact_and_refuses_echoes(wolf, run_worker, tmp_path):
    db = tmp_path / "memory.db"
    script = Script(_answer)
    async with run_worker(local_models={"m": script.model}):
        sid = await _session(wolf, _manifest(db, "auto"), script)
        await record_history(wolf.client, workflow_id(wolf.tenant, sid), "memory_extract")
    store = open_store(str(db))
    rows = admin.current(store, [ALICE])
    assert [(r.body, r.kind, r.about, r.provenance.source) for r in rows] == [
        (FACT, "user", "diet", "extracted")
    ]
    evidence = rows[0].provenance.call.split()
    assert evidence and all(len(d) == 16 for d in evidence)
    store.close()


async def test_review_keeps_candidates_pending_and_unsearched(wolf, run_worker, tmp_path):
    db = tmp_path / "memory.db"
    script = Script(_answer)
    async with run_worker(local_models={"m": script.model}):
        await _session(wolf, _manifest(db, "review"), script)
    store = open_store(str(db))
    assert [(r.body, r.kind) for r in admin.current(store, [ALICE])] == [(FACT, PENDING)]
    assert store.search(MemoryView(), [ALICE], ["vegetarian"], 10) == []
    assert admin.approve(store, ALICE, "m1", "user") == "approved m1 as m2"
    assert [r.body for r in store.search(MemoryView(), [ALICE], ["vegetarian"], 10)] == [FACT]
    store.close()


def test_a_retried_pass_writes_once_and_a_later_pass_skips_duplicates(tmp_path):
    from agentwolf.activities.memory import _keep
    from agentwolf.config.manifest import MemorySettings
    from agentwolf.workflows.contracts import HostRef
    from agentwolf.workflows.memory_tools import MemoryExtract, Provenance

    store = open_store(str(tmp_path / "memory.db"))
    ref = HostRef(config_id="c", tenant="default", workflow_id=workflow_id("default", "s1"))
    messages = [f"user: {FACT}"]
    found: list[dict[str, object]] = [{"text": FACT, "evidence": [1]}]
    inp = MemoryExtract(
        ref=ref, agent="a", owner="alice", settings=MemorySettings(extract="auto"), models=["local:m"],
        messages=messages, templates=[], key="s1/extract/2", provenance=Provenance(session="s1"),
    )  # fmt: skip
    first = _keep(store, inp, found)
    assert _keep(store, inp, found) == first == ["m1"]  # the retry finds the pass's receipt
    assert _keep(store, inp.model_copy(update={"key": "s1/extract/4"}), found) == []  # a duplicate
    assert [r.body for r in store.history([ALICE])] == [FACT]
    store.close()
