"""The config registry on the real dev server: versions, hot reload into running sessions, rollback,
pinning, refusals, the start/push race, bounded history; and the `wolf config` verbs."""

from __future__ import annotations

import json
import sys
import uuid
from pathlib import Path

import pytest
import yaml
from temporalio.client import WorkflowUpdateFailedError

from agentwolf.config.loading import ManifestError
from agentwolf.config.manifest import Manifest
from agentwolf.workflows.configs.config_registry import (
    ConfigRegistryWorkflow,
    PushRequest,
    RegistryInput,
)
from agentwolf.workflows.types import registry_id, workflow_id
from tests.conftest import TOOLS_SERVER, record_history, wait_for
from tests.support.models import Script, text
from tests.support.polls import idle


def _config(**agents: str) -> Manifest:
    """Agents on the worker's `local:m` model, each with its instructions."""
    return Manifest.model_validate(
        {"agents": {a: {"model": "local:m", "instructions": i} for a, i in agents.items()}}
    )


def _name() -> str:
    return f"cfg-{uuid.uuid4().hex[:8]}"


def _instructions(script: Script) -> str | None:
    return script.requests[-1][-1].instructions


async def _turn(wolf, sid, prompt):
    n = (await wolf.status(sid)).counters.turns + 1
    await wolf.prompt(sid, prompt)
    await wait_for(lambda: idle(wolf, sid, n))


async def _told(wolf, name, version):
    """The registry has signalled the running sessions about `version`."""
    history = await wolf.config_history(name)
    return history[-1].version == version and history[-1].notified is not None and history[-1]


async def _listed(wolf, name, version):
    """`config_list` reads visibility, which lags a little behind the registry."""
    configs = await wolf.config_list()
    return configs if any((c.name, c.version) == (name, version) for c in configs) else None


async def _events(wolf, sid):
    """Every event so far (the log up to the current offset)."""
    end = await wolf.event_offset(sid)
    events = []
    async for offset, event in wolf.events(sid):
        events.append(event)
        if offset + 1 >= end:
            break
    return events


async def test_a_new_version_reaches_the_next_turn_and_recompiles(wolf, run_worker):
    script = Script(lambda s: text("ok"))
    name = _name()
    async with run_worker(local_models={"m": script.model}):
        first = await wolf.config_push(name, _config(a="v1 rules"), note="first")
        assert (first.version, first.created) == (1, True)
        again = await wolf.config_push(name, _config(a="v1 rules"))
        assert (again.version, again.created) == (1, False)  # identical content: no new version

        sid = await wolf.start_session("a", config_name=name)
        await _turn(wolf, sid, "one")
        assert _instructions(script) == "v1 rules"

        second = await wolf.config_push(name, _config(a="v2 rules"), note="stricter")
        assert (second.version, second.created) == (2, True)
        assert (await wait_for(lambda: _told(wolf, name, 2))).notified == 1
        await _turn(wolf, sid, "two")
        assert _instructions(script) == "v2 rules"
        status = await wolf.status(sid)
        assert (status.config_name, status.config_version) == (name, 2)
        events = await _events(wolf, sid)
        history = await wolf.config_history(name)
        listed = await wait_for(lambda: _listed(wolf, name, 2))
        await wolf.close(sid)
        await wolf.result(sid)
        await record_history(wolf.client, workflow_id("default", sid), "config_changed")
    changed = [e for e in events if e.kind == "config_changed"]
    assert [e.outcome for e in changed] == ["recompile"]
    assert f"config {name} v2: this agent changed" in changed[0].text
    kinds = [e.kind for e in events]
    compiled = [i for i, kind in enumerate(kinds) if kind == "compiled"]
    assert len(compiled) == 2 and compiled[0] < kinds.index("config_changed") < compiled[1]
    assert [(v.version, v.note, v.notified) for v in history] == [(1, "first", 0), (2, "stricter", 1)]
    assert [(c.name, c.version) for c in listed if c.name == name] == [(name, 2)]


async def _second_turn_after_push(wolf, run_worker, v2: Manifest, history: str | None = None):
    """Agent b's session on v1 runs a turn, v2 is pushed, then a second turn: its events and status."""
    script = Script(lambda s: text("ok"))
    name = _name()
    async with run_worker(local_models={"m": script.model}):
        await wolf.config_push(name, _config(a="a v1", b="b rules"))
        sid = await wolf.start_session("b", config_name=name)
        await _turn(wolf, sid, "one")
        await wolf.config_push(name, v2)
        await wait_for(lambda: _told(wolf, name, 2))
        await _turn(wolf, sid, "two")
        events = await _events(wolf, sid)
        status = await wolf.status(sid)
        await wolf.close(sid)
        await wolf.result(sid)
        if history:
            await record_history(wolf.client, workflow_id("default", sid), history)
    assert _instructions(script) == "b rules"
    return events, status


async def test_a_version_without_the_sessions_agent_is_refused_by_the_session(wolf, run_worker):
    events, status = await _second_turn_after_push(wolf, run_worker, _config(a="a v2"))  # b is gone in v2
    refused = [e for e in events if e.kind == "config_changed"]
    assert [e.outcome for e in refused] == ["refused"] and "has no agent 'b'" in (refused[0].text or "")
    assert status.config_version == 1 and status.last_outcome == "completed"  # it keeps working on v1


async def test_a_session_of_an_unchanged_agent_does_not_recompile(wolf, run_worker):
    v2 = _config(a="a v2", b="b rules")  # only agent a changed
    events, status = await _second_turn_after_push(wolf, run_worker, v2, history="config_unchanged")
    assert [e.outcome for e in events if e.kind == "config_changed"] == ["unchanged"]
    assert [e.kind for e in events].count("compiled") == 1
    assert status.config_version == 2


async def test_an_invalid_push_is_refused_and_changes_nothing(wolf, run_worker, tmp_path):
    script = Script(lambda s: text("ok"))
    name = _name()
    async with run_worker(local_models={"m": script.model}):
        await wolf.config_push(name, _config(a="rules"))
        sid = await wolf.start_session("a", config_name=name)
        bad = tmp_path / "bad.yaml"
        bad.write_text("agents:\n  a:\n    model: local:m\n    instrucshuns: x\n")
        with pytest.raises(ManifestError, match=f"{bad}:4: agents.a.instrucshuns: unknown key"):
            await wolf.config_push(name, bad)
        empty = tmp_path / "empty.yaml"
        empty.write_text("host: {}\n")
        with pytest.raises(ManifestError, match="needs at least one agent"):
            await wolf.config_push(name, empty)
        broken = Manifest.model_validate(
            {"agents": {"a": {"model": "local:m", "capabilities": [{"mcp": "nope"}]}}}
        )
        with pytest.raises(ManifestError, match="unknown MCP server 'nope'"):
            await wolf.config_push(name, broken)
        # The registry's own validator refuses what a client that skips the checks sends.
        registry = wolf.client.get_workflow_handle_for(
            ConfigRegistryWorkflow.run, registry_id("default", name)
        )
        with pytest.raises(WorkflowUpdateFailedError) as refused:
            await registry.execute_update(ConfigRegistryWorkflow.push, PushRequest(manifest=broken))
        assert "agents.a.capabilities.0.mcp: unknown MCP server 'nope'" in str(refused.value.cause)
        with pytest.raises(ValueError, match="no version 7"):
            await wolf.config_rollback(name, 7)
        history = await wolf.config_history(name)
        await _turn(wolf, sid, "still v1?")
        events = await _events(wolf, sid)
        status = await wolf.status(sid)
        await wolf.close(sid)
    assert [v.version for v in history] == [1]
    assert not [e for e in events if e.kind == "config_changed"]
    assert status.config_version == 1


async def test_rollback_is_a_new_version_and_sessions_switch_back(wolf, run_worker):
    script = Script(lambda s: text("ok"))
    name = _name()
    async with run_worker(local_models={"m": script.model}):
        v1 = await wolf.config_push(name, _config(a="old rules"))
        sid = await wolf.start_session("a", config_name=name)
        await wolf.config_push(name, _config(a="new rules"))
        await wait_for(lambda: _told(wolf, name, 2))
        await _turn(wolf, sid, "one")
        assert _instructions(script) == "new rules"
        back = await wolf.config_rollback(name, 1)
        assert (back.version, back.identity, back.created) == (3, v1.identity, True)
        assert not (await wolf.config_rollback(name, 1)).created  # v3 already has v1's content
        await wait_for(lambda: _told(wolf, name, 3))
        await _turn(wolf, sid, "two")
        assert _instructions(script) == "old rules"
        assert (await wolf.config_get(name)).version == 3
        assert (await wolf.config_get(name, 2)).manifest == _config(a="new rules")
        await wolf.close(sid)
        await wolf.result(sid)
        history = await wolf.config_history(name)
        await record_history(wolf.client, registry_id("default", name), "config_registry_rollback")
    assert [(v.version, v.note) for v in history][-1] == (3, "rollback to v1")


async def test_a_pinned_session_ignores_pushes(wolf, run_worker):
    script = Script(lambda s: text("ok"))
    name = _name()
    async with run_worker(local_models={"m": script.model}):
        await wolf.config_push(name, _config(a="pinned rules"))
        sid = await wolf.start_session("a", config_name=name, pinned=True)
        await wolf.config_push(name, _config(a="newer rules"))
        await wait_for(lambda: _told(wolf, name, 2))
        await _turn(wolf, sid, "one")
        events = await _events(wolf, sid)
        status = await wolf.status(sid)
        await wolf.close(sid)
    assert _instructions(script) == "pinned rules"
    assert status.config_version == 1 and not [e for e in events if e.kind == "config_changed"]
    with pytest.raises(ValueError, match="pinning applies to registry configs"):
        await wolf.start_session("a", _config(a="x"), pinned=True)


async def test_a_push_while_a_session_starts_still_reaches_it(wolf, run_worker, monkeypatch):
    """The client read v1, then v2 was pushed before the session was visible to the registry."""
    script = Script(lambda s: text("ok"))
    name = _name()
    async with run_worker(local_models={"m": script.model}):
        await wolf.config_push(name, _config(a="v1"))
        real_get = type(wolf).config_get
        pushed = []

        async def get_then_push(self, config, version=None):
            found = await real_get(self, config, version)
            if not pushed:
                pushed.append(await self.config_push(config, _config(a="v2")))
            return found

        monkeypatch.setattr(type(wolf), "config_get", get_then_push)
        sid = await wolf.start_session("a", config_name=name)
        monkeypatch.undo()
        assert (await wolf.status(sid)).config_version in (1, 2)
        await wait_for(lambda: _told(wolf, name, 2))
        await _turn(wolf, sid, "which rules?")
        await wolf.close(sid)
    assert _instructions(script) == "v2"


async def test_the_registry_continues_as_new_and_keeps_the_last_manifests(
    wolf, run_worker, client, task_queue
):
    name = _name()
    wid = registry_id("default", name)
    async with run_worker():
        handle = await client.start_workflow(
            ConfigRegistryWorkflow.run,
            RegistryInput(tenant="default", name=name, keep_manifests=2, max_history_events=20),
            id=wid,
            task_queue=task_queue,
        )
        first_run = handle.result_run_id
        for i in range(1, 7):
            assert (await wolf.config_push(name, _config(a=f"rules {i}"))).version == i
            await wait_for(lambda i=i: _told(wolf, name, i))
        await wait_for(lambda: _run_changed(client, wid, first_run))
        history = await wolf.config_history(name)
        assert [v.version for v in history] == [1, 2, 3, 4, 5, 6]  # all metadata survives
        assert (await wolf.config_get(name, 5)).manifest == _config(a="rules 5")
        with pytest.raises(ValueError, match="no longer kept"):
            await wolf.config_get(name, 1)
        with pytest.raises(ValueError, match="no longer kept"):
            await wolf.config_rollback(name, 2)
        assert (await wolf.config_rollback(name, 5)).version == 7
        await record_history(client, wid, "config_registry_continue_as_new", run_id=first_run)


async def _run_changed(client, wid, first_run):
    return (await client.get_workflow_handle(wid).describe()).run_id != first_run


# -- the CLI ----------------------------------------------------------------------------------


def _yaml(path: Path, instructions: str, **host: object) -> str:
    path.write_text(
        yaml.safe_dump(
            {
                "host": {
                    "mcp_servers": {"tools": {"command": sys.executable, "args": [TOOLS_SERVER]}},
                    **host,
                },
                "agents": {
                    "a": {
                        "model": "local:m",
                        "instructions": instructions,
                        "capabilities": [{"mcp": "tools"}],
                    }
                },
            }
        )
    )
    return str(path)


async def test_cli_push_list_history_show_rollback_and_submit(client, tmp_path):
    from agentwolf.worker.bootstrap import TASK_QUEUE, create_worker
    from tests.test_cli import _wolf

    address = client.service_client.config.target_host
    tenant = f"cli-{uuid.uuid4().hex[:6]}"
    script = Script(lambda s: text(f"done under: {_instructions(s)}"))
    v1 = _yaml(tmp_path / "v1.yaml", "first", models={"providers": {"openai": {"api_key": "${CANARY}"}}})
    v2 = _yaml(tmp_path / "v2.yaml", "second")
    worker, hosts = create_worker(client, task_queue=TASK_QUEUE, local_models={"m": script.model})

    async def wolf(*args: str):
        return await _wolf(address, *args, WOLF_TENANT=tenant, CANARY="sk-canary-9")

    async with worker:
        pushed = await wolf("config", "push", "svc", v1, "--note", "first", "--json")
        assert pushed.returncode == 0, pushed.stderr
        assert json.loads(pushed.stdout) | {"identity": None} == {
            "name": "svc",
            "version": 1,
            "created": True,
            "identity": None,
        }
        same = await wolf("config", "push", "svc", v1)
        assert same.returncode == 0 and "unchanged: svc v1" in same.stdout
        bad = tmp_path / "bad.yaml"
        bad.write_text("agents:\n  a:\n    modle: x\n")
        refused = await wolf("config", "push", "svc", str(bad))
        assert refused.returncode == 2 and f"{bad}:3: agents.a.modle: unknown key" in " ".join(
            refused.stderr.split()
        )
        assert (await wolf("config", "push", "svc", v2, "--json")).returncode == 0

        async def listed():
            return [
                (c["name"], c["version"]) for c in json.loads((await wolf("config", "list", "--json")).stdout)
            ]

        assert await wait_for(lambda: _equals(listed(), [("svc", 2)]), timeout=20)
        history = json.loads((await wolf("config", "history", "svc", "--json")).stdout)
        assert [(v["version"], v["note"]) for v in history] == [(1, "first"), (2, "")]
        shown = await wolf("config", "show", "svc@1", "--json")
        assert shown.returncode == 0, shown.stderr
        view = json.loads(shown.stdout)
        assert (
            view["version"] == 1
            and view["manifest"]["host"]["models"]["providers"]["openai"]["api_key"] == "****"
        )
        assert "sk-canary-9" not in shown.stdout
        human = await wolf("config", "show", "svc")
        assert human.stdout.startswith("# svc v2") and "instructions: second" in human.stdout
        rolled = json.loads((await wolf("config", "rollback", "svc", "1", "--json")).stdout)
        assert (rolled["version"], rolled["created"]) == (3, True)

        run = await wolf("submit", "go", "-a", "a", "--config", "svc", "--wait", "--json")
        assert run.returncode == 0, run.stderr
        assert json.loads(run.stdout.splitlines()[0])["output"] == "done under: first"
        sid = json.loads(run.stdout.splitlines()[-1])["session_id"]
        status = json.loads((await wolf("status", sid, "--json")).stdout)
        assert (status["config_name"], status["config_version"]) == ("svc", 3)

        for args, words in [
            (("config", "show", "ghost"), "no config named 'ghost'"),
            (("config", "history", "ghost"), "no config named 'ghost'"),
            (("config", "rollback", "svc", "9"), "no version 9"),
            (("submit", "x", "-a", "a", "--config", v1, "--pin"), "pinning applies to registry configs"),
            (("config", "push", "bad/name", v1), "invalid config name"),
        ]:
            failed = await wolf(*args)
            assert failed.returncode == 2, (args, failed.stderr)
            assert words in failed.stderr and "Traceback" not in failed.stderr, failed.stderr
        await hosts.close()


async def _equals(value, expected):
    return await value == expected
