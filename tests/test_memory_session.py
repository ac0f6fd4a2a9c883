"""Long-term memory in sessions on a real dev server: the faces as tools, owners from who started the
session (never from the model), forks as of their cut, replay without the store, and SIGKILLs during
`remember` (one row each)."""

from __future__ import annotations

import asyncio
import functools
import json
import os
import random
import re
import signal
from pathlib import Path
from typing import Any

import pytest
from pydantic_ai.messages import ModelRequest, ModelResponse, ToolReturnPart
from temporalio.worker import Replayer

from agentwolf.client.wolf_client import WolfClient
from agentwolf.config.manifest import Manifest
from agentwolf.memory.namespaces import Namespace
from agentwolf.memory.stores import open_store
from agentwolf.payloads import data_converter
from agentwolf.worker.bootstrap import WORKFLOWS
from agentwolf.workflows.types import workflow_id
from tests.conftest import make_manifest, openai_manifest, record_history, wait_for, worker_process
from tests.support.models import Script, text, tools, user_texts
from tests.support.openai_server import Reply, ScriptedOpenAI, tool_outputs
from tests.support.polls import idle


def _commands(script: Script) -> ModelResponse:
    """A prompt `call TOOL {json}` calls that tool; its result comes back as the answer."""
    last = script.requests[-1][-1]
    assert isinstance(last, ModelRequest)
    returns = [p for p in last.parts if isinstance(p, ToolReturnPart)]
    if returns:
        return text(str(returns[-1].content))
    _, name, args = user_texts([last])[-1].split(" ", 2)
    return tools((name, json.loads(args)))


def _manifest(db: Path, **memory: Any) -> Any:
    return make_manifest(
        {"memory": {"tools": "both", **memory}, "capabilities": []}, memory={"store": f"sqlite:///{db}"}
    )


async def _ask(wolf: WolfClient, sid: str, tool: str, **args: Any) -> str:
    turns = (await wolf.status(sid)).counters.turns
    await wolf.prompt(sid, f"call {tool} {json.dumps(args)}")
    await wait_for(lambda: idle(wolf, sid, turns + 1))
    return (await wolf.status(sid)).last_output or ""


async def test_memory_outlives_the_session_for_its_owner_only(wolf, run_worker, tmp_path):
    db = tmp_path / "memory.db"
    manifest = _manifest(db)
    script = Script(_commands)
    async with run_worker(local_models={"m": script.model}):
        first = await wolf.start_session("a", manifest, owner="alice")
        kept = await _ask(wolf, first, "remember", text="Alice likes green tea", kind="user", owner="bob")
        assert kept == "kept as m1"  # `owner` in the arguments is not a parameter: alice's memory
        assert (
            await _ask(
                wolf, first, "memory", command="create", path="/memories/prefs.md", file_text="tea: green"
            )
            == "File created successfully at: /memories/prefs.md"
        )
        await wolf.close(first)

        later = await wolf.start_session("a", manifest, owner="alice")
        assert "Alice likes green tea" in await _ask(wolf, later, "search_memory", query="what tea")
        assert "tea: green" in await _ask(wolf, later, "memory", command="view", path="/memories/prefs.md")
        traversal = await _ask(wolf, later, "memory", command="view", path="/memories/../../bob")
        assert "refused path" in traversal

        bob = await wolf.start_session("a", manifest, owner="bob")
        assert await _ask(wolf, bob, "search_memory", query="tea") == "no memories match"
        assert (await _ask(wolf, bob, "memory", command="view", path="/memories")).endswith("(empty)")

        nobody = await wolf.start_session("a", manifest)
        assert "started for no one" in await _ask(wolf, nobody, "search_memory", query="tea")
        assert "memory" in script.offered[0] and "remember" in script.offered[0]

        # Replay reads nothing: the recorded results answer (a replayer has no activities at all).
        await record_history(wolf.client, workflow_id(wolf.tenant, later), "memory_tools")
        history = await wolf.client.get_workflow_handle(workflow_id(wolf.tenant, later)).fetch_history()
        store = open_store(str(db))
        before = store.history([Namespace("default", "alice", "a")])
        await Replayer(workflows=WORKFLOWS, data_converter=data_converter()).replay_workflow(history)
        assert store.history([Namespace("default", "alice", "a")]) == before
        store.close()


async def test_a_fork_sees_memory_as_of_its_cut_and_keeps_its_writes(wolf, run_worker, tmp_path):
    from agentwolf.worker.bootstrap import TASK_QUEUE  # forks start on the CLI's queue

    wolf = WolfClient(wolf.client, task_queue=TASK_QUEUE)
    manifest = _manifest(tmp_path / "memory.db")
    script = Script(_commands)
    async with run_worker(task_queue=TASK_QUEUE, local_models={"m": script.model}):
        sid = await wolf.start_session("a", manifest, owner="alice")
        await _ask(wolf, sid, "remember", text="Alice likes cats", kind="user")
        await _ask(wolf, sid, "search_memory", query="likes")  # turn 2 reads
        await _ask(wolf, sid, "remember", text="Alice likes dogs", kind="user")
        made = await wolf.fork(sid, at="2")
        assert [e.tool for e in made.effects] == ["remember"]  # the write after the cut is an effect
        in_fork = await _ask(wolf, made.session_id, "search_memory", query="likes")
        assert "cats" in in_fork and "dogs" not in in_fork
        await _ask(wolf, made.session_id, "remember", text="Alice likes birds", kind="user")
        assert "birds" in await _ask(wolf, made.session_id, "search_memory", query="likes")
        in_source = await _ask(wolf, sid, "search_memory", query="likes")
        assert "dogs" in in_source and "birds" not in in_source


@pytest.mark.timeout(900)
async def test_sigkill_during_remember_leaves_one_row_each_time(env, wolf, task_queue, tmp_path):
    """20 sessions each remember one fact; the worker is killed at a random moment of each `remember`
    call and a new one takes over: each fact is one row (the receipt answered the retry)."""
    db = tmp_path / "memory.db"
    kills = int(os.environ.get("WOLF_MEMORY_KILLS", "20"))

    def reply(request: dict[str, Any]) -> Reply:
        if not tool_outputs(request):
            prompt = re.search(r"fact number \d+", json.dumps(request))
            assert prompt is not None
            return Reply(tool_calls=[("remember", {"text": prompt.group(), "kind": "project"})])
        return Reply(text="kept")

    rng = random.Random(41)
    with ScriptedOpenAI(reply) as server:
        spec = openai_manifest(server.base_url, memory={"store": f"sqlite:///{db}"}).model_dump()
        spec["agents"]["a"] |= {"memory": {"tools": "record"}, "capabilities": []}
        manifest = Manifest.model_validate(spec)
        worker = worker_process(env, task_queue)
        sessions = []
        try:
            for n in range(kills):
                sid = await wolf.start_session("a", manifest, owner="alice", prompt=f"fact number {n}")
                sessions.append(sid)
                async for _, event in wolf.events(sid):
                    if event.kind == "tool_call_started" and event.tool == "remember":
                        break
                await asyncio.sleep(rng.random() * 0.3)
                worker.send_signal(signal.SIGKILL)
                worker.wait()
                worker = worker_process(env, task_queue)  # takes the retry over, and the next session
            for sid in sessions:
                await wait_for(functools.partial(idle, wolf, sid, 1), timeout=120)
        finally:
            worker.terminate()
            worker.wait(60)
    store = open_store(str(db))
    rows = store.history([Namespace("default", "alice", "a")])
    store.close()
    assert sorted(r.body for r in rows) == sorted(f"fact number {n}" for n in range(kills))


async def test_the_owner_comes_from_the_key_or_the_request_never_from_the_model(
    client, task_queue, run_worker, tmp_path
):
    """Over the OpenAI API: a key's `subject` owns its sessions whatever `user` says; a key without
    one takes the request's `user` within the key (it cannot name a subject's memory); without
    either, the key itself."""
    import httpx

    from agentwolf.config.policy import ApiKeyEntry
    from agentwolf.protocols.auth import ApiKeys, digest
    from tests.support.serving import serving

    manifest = _manifest(tmp_path / "memory.db")
    script = Script(_commands)
    keys = ApiKeys(
        [
            ApiKeyEntry(sha256=digest("key-alice"), tenant="t", subject="alice"),
            ApiKeyEntry(sha256=digest("key-app"), tenant="t"),
        ]
    )
    remember = 'call remember {"text": "the secret is 42", "kind": "user"}'
    search = 'call search_memory {"query": "secret"}'

    async def chat(key: str, prompt: str, user: str | None = None) -> str:
        body: dict[str, Any] = {"model": "a", "messages": [{"role": "user", "content": prompt}]}
        if user is not None:
            body["user"] = user
        reply = await http.post(
            base + "/v1/chat/completions", json=body, headers={"Authorization": f"Bearer {key}"}
        )
        assert reply.status_code == 200, reply.text
        return str(reply.json()["choices"][0]["message"]["content"])

    async with (
        run_worker(local_models={"m": script.model}),
        serving(client, task_queue, manifest, keys=keys) as base,
        httpx.AsyncClient(timeout=120) as http,
    ):
        assert await chat("key-alice", remember, user="mallory") == "kept as m1"
        assert "42" in await chat("key-alice", search)
        assert await chat("key-app", search, user="alice") == "no memories match"  # not the key's alice
        assert await chat("key-app", search, user="mallory") == "no memories match"
        assert await chat("key-app", remember, user="bob") == "kept as m1"
        assert "42" in await chat("key-app", search, user="bob")
        assert await chat("key-app", search) == "no memories match"  # the key's own memory
        reply = await http.post(
            base + "/v1/chat/completions",
            json={"model": "a", "messages": [{"role": "user", "content": search}], "user": "../alice"},
            headers={"Authorization": "Bearer key-app"},
        )
        assert reply.status_code == 400 and "invalid memory owner" in reply.text
