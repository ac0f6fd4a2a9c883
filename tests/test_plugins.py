"""Plugins: Python function tools and `local:` models registered on the worker, used by sessions on a
real dev server under the same permission rules as MCP tools; loading failures are clear errors."""

from __future__ import annotations

import asyncio
import importlib.metadata
import json
import os
import subprocess
import sys
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest
from pydantic_ai import ModelRetry, RunContext
from pydantic_ai.models.function import FunctionModel
from temporalio.client import WorkflowFailureError

from agentwolf.config.manifest import Manifest
from agentwolf.config.policy import WorkerPolicy
from agentwolf.extensions.functions import FunctionToolsCap
from agentwolf.hosts.models import build_model
from agentwolf.plugins import PluginError, PluginRegistry, Plugins, load_plugins
from tests.conftest import wait_for
from tests.support.models import Script, sequence, text, tool
from tests.support.polls import tool_returns
from tests.test_cli import WOLF
from tests.test_local_stack import _settled

ROOT = Path(__file__).parent.parent
EXAMPLES = ROOT / "examples"


@pytest.fixture
def notes(monkeypatch: pytest.MonkeyPatch) -> ModuleType:
    """The docs' example plugin (examples/notes_plugin.py), importable as `notes_plugin`, no notes."""
    monkeypatch.syspath_prepend(str(EXAMPLES))
    module = importlib.import_module("notes_plugin")
    module.NOTES.clear()
    return module


def _manifest(*rules: dict[str, str], plugin: str = "notes_plugin") -> Manifest:
    return Manifest.model_validate(
        {
            "host": {"mcp_servers": {"notes": {"plugin": plugin}}, "permissions": {"rules": list(rules)}},
            "agents": {"a": {"model": "local:m", "capabilities": [{"mcp": "notes"}]}},
        }
    )


def _hosts(script: Script) -> dict[str, Any]:
    """A worker's hosts with the notes plugin (`run_worker(**_hosts(script))`)."""
    return {"local_models": {"m": script.model}, "plugins": load_plugins(["notes_plugin"], entry_points=[])}


async def test_the_model_calls_a_plugin_tool(wolf, run_worker, notes):
    script = Script(sequence(tool("add_note", {"text": "oat milk"}), text("noted it")))
    async with run_worker(**_hosts(script)):
        result = await wolf.result(await wolf.submit("remember oat milk", "a", _manifest()))
    assert result.output == "noted it"
    assert notes.NOTES == ["oat milk"]
    (ret,) = tool_returns(script.requests[1][-1:])
    assert (ret.outcome, ret.content) == ("success", "noted (1 so far)")
    assert script.offered[0] >= {"add_note", "delete_notes"}


async def test_a_deny_rule_holds_for_plugin_tools(wolf, run_worker, notes):
    notes.NOTES.append("keep me")
    script = Script(sequence(tool("delete_notes", {}), text("could not")))
    manifest = _manifest({"tool": "notes:delete_.*", "action": "deny"})
    async with run_worker(**_hosts(script)):
        result = await wolf.result(await wolf.submit("forget everything", "a", manifest))
    (ret,) = tool_returns(script.requests[1][-1:])
    assert result.output == "could not"
    assert ret.outcome == "denied" and "denied by policy" in ret.content
    assert notes.NOTES == ["keep me"]


async def test_a_confirm_rule_asks_before_a_plugin_tool_runs(wolf, run_worker, notes):
    script = Script(sequence(tool("add_note", {"text": "call mum"}, "c1"), text("done")))
    manifest = _manifest({"tool": "notes:add_note", "action": "confirm"})
    async with run_worker(**_hosts(script)):
        sid = await wolf.submit("remember to call mum", "a", manifest)

        async def pending():
            status = await wolf.status(sid)
            return status.pending_approvals if status.state == "waiting_approval" else None

        (asked,) = await wait_for(pending)
        assert (asked.call_id, asked.tool, asked.args) == ("c1", "add_note", {"text": "call mum"})
        assert notes.NOTES == []  # nothing ran before the answer
        await wolf.approve(sid, "c1")
        result = await wolf.result(sid)
    assert result.output == "done" and notes.NOTES == ["call mum"]


async def test_a_plugin_missing_on_the_worker_fails_the_compile_clearly(wolf, run_worker, notes):
    script = Script(sequence(text("never asked")))
    async with run_worker(**_hosts(script)):
        sid = await wolf.submit("hi", "a", _manifest(plugin="absent_plugin"))
        with pytest.raises(WorkflowFailureError) as failure:
            await wolf.result(sid)
    message = str(failure.value.cause)
    assert "plugin 'absent_plugin' is not loaded on this worker" in message
    assert "loaded: notes_plugin" in message
    assert script.calls == 0


async def test_bad_arguments_and_failures_reach_the_model_as_errors(notes):
    def lookup(city: str, limit: int = 3) -> list[str]:
        """Look something up."""
        if city == "nowhere":
            raise ModelRetry("no such city: try a real one")
        raise OSError("disk on fire")

    registry = PluginRegistry("t")
    registry.tool(lookup)
    cap = FunctionToolsCap("s", "t", registry.tools, ["t"], call_timeout=5)
    invalid = await cap.call_tool("lookup", {"city": "x", "limit": "many"})
    retry = await cap.call_tool("lookup", {"city": "nowhere"})
    failed = await cap.call_tool("lookup", {"city": "Paris"})
    unknown = await cap.call_tool("nope", {})
    assert all(r.is_error for r in (invalid, retry, failed, unknown))
    texts = [r.content[0].text for r in (invalid, retry, failed, unknown)]  # type: ignore[union-attr]
    assert "invalid arguments for lookup" in texts[0] and "limit" in texts[0]
    assert texts[1] == "no such city: try a real one"
    assert texts[2] == "lookup failed: OSError: disk on fire"
    assert texts[3] == "plugin 't' has no tool 'nope'"


async def test_structured_results_are_json_and_slow_calls_time_out():
    registry = PluginRegistry("t")

    @registry.tool(repeat_safe=True)
    async def stats(n: int) -> dict[str, int]:
        """Counts."""
        await asyncio.sleep(n)
        return {"n": n}

    cap = FunctionToolsCap("s", "t", registry.tools, ["t"], call_timeout=0.5)
    (entry,) = await cap.list_tools()
    assert entry.repeat_safe and entry.parameters["required"] == ["n"]
    fast, slow = await cap.call_tool("stats", {"n": 0}), await cap.call_tool("stats", {"n": 5})
    assert fast.content[0].text == '{"n":0}' and not fast.is_error  # type: ignore[union-attr]
    assert slow.is_error and slow.content[0].text == "tool call timed out after 0.5s"  # type: ignore[union-attr]


def test_a_model_factory_is_called_when_a_host_builds_the_model():
    built: list[FunctionModel] = []

    def factory() -> FunctionModel:
        built.append(FunctionModel(lambda m, i: text("hi")))
        return built[-1]

    registry = PluginRegistry("p")
    registry.model("lazy", factory)
    plugins = Plugins()
    plugins.add(registry)
    secrets = WorkerPolicy().secrets_for("default")
    assert built == []
    model = build_model(["local:lazy"], {}, plugins.models, secrets)
    assert built == [model]


def test_registration_mistakes_are_refused():
    registry = PluginRegistry("p")
    with pytest.raises(PluginError, match="tool 'needs_context'"):

        @registry.tool
        def needs_context(ctx: RunContext[None], x: int) -> int:
            return x

    registry.model("m", FunctionModel(lambda m, i: text("x")))
    other = PluginRegistry("q")
    other.model("m", FunctionModel(lambda m, i: text("y")))
    plugins = Plugins()
    plugins.add(registry)
    with pytest.raises(PluginError, match="plugin 'q' registers models another plugin registered: local:m"):
        plugins.add(other)


def test_a_plugin_that_fails_to_import_is_named(tmp_path, monkeypatch):
    (tmp_path / "broken_plugin.py").write_text("raise RuntimeError('no config file')\n")
    (tmp_path / "hookless_plugin.py").write_text("X = 1\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    with pytest.raises(PluginError, match=r"'broken_plugin' .*raised RuntimeError: no config file"):
        load_plugins(["broken_plugin"], entry_points=[])
    with pytest.raises(PluginError, match=r"'hookless_plugin' \(module\) has no `register"):
        load_plugins(["hookless_plugin"], entry_points=[])


@pytest.mark.parametrize(
    "command",
    [[sys.executable, "-m", "agentwolf.worker"], [WOLF, "worker"], [WOLF, "up"]],
    ids=["python -m agentwolf.worker", "wolf worker", "wolf up"],
)
def test_a_worker_with_a_broken_plugin_exits_at_start_with_one_line(command, tmp_path):
    worker = subprocess.run(
        [*command, "--plugin", "no_such_plugin_module"],
        check=False,
        capture_output=True,
        text=True,
        timeout=60,
        env={**os.environ, "WOLF_HOME": str(tmp_path), "NO_COLOR": "1"},
    )
    assert worker.returncode == 2
    assert worker.stderr.strip().splitlines()[-1] == (
        "error: cannot load plugin 'no_such_plugin_module' (module): importing it raised "
        "ModuleNotFoundError: No module named 'no_such_plugin_module'"
    )
    assert not (tmp_path / "worker.pid").exists()


def test_installed_entry_points_are_discovered(tmp_path, monkeypatch, notes):
    """A dist-info folder on sys.path is what an installed package with the entry point looks like."""
    dist = tmp_path / "notes_dist-1.0.dist-info"
    dist.mkdir()
    (dist / "METADATA").write_text("Metadata-Version: 2.1\nName: notes-dist\nVersion: 1.0\n")
    (dist / "entry_points.txt").write_text("[agentwolf.plugins]\nnotes = notes_plugin\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    plugins = load_plugins()
    assert sorted(plugins.tools["notes"]) == ["add_note", "delete_notes"]
    assert "notes-demo" in plugins.models


def test_an_entry_point_may_name_the_hook_itself(notes):
    point = importlib.metadata.EntryPoint("n", "notes_plugin:register", "agentwolf.plugins")
    assert sorted(load_plugins(entry_points=[point]).tools["n"]) == ["add_note", "delete_notes"]
    bad = importlib.metadata.EntryPoint("b", "notes_plugin:nothing_here", "agentwolf.plugins")
    with pytest.raises(
        PluginError, match=r"cannot load plugin 'b' \(entry point 'notes_plugin:nothing_here'\)"
    ):
        load_plugins(entry_points=[bad])


def test_wolf_up_runs_the_worker_with_its_plugins(tmp_path, monkeypatch, notes):
    """`wolf up --plugin` starts the local worker with them and restarts it when they change; an
    implicit `up` (plugins None) keeps the running worker's; a plugin that cannot load starts nothing."""
    import socket

    from agentwolf.ops import local_stack

    home = tmp_path / "home"
    home.mkdir()
    monkeypatch.setenv("PYTHONPATH", str(EXAMPLES))
    with socket.socket() as listener:  # stands in for the server, so `up` starts only the worker
        listener.bind(("127.0.0.1", 0))
        listener.listen()
        monkeypatch.setenv("WOLF_HOME", str(home))
        monkeypatch.setenv("WOLF_LOCAL_ADDRESS", f"127.0.0.1:{listener.getsockname()[1]}")
        try:
            first = local_stack.up(plugins=["notes_plugin"])
            cmdline = _settled(first.worker_pid)["cmdline"]  # `up` trusts a worker only once exec shows
            assert first.started == ["worker"] and cmdline[-2:] == ["--plugin", "notes_plugin"]
            assert local_stack.up().started == []
            assert local_stack.up(plugins=["notes_plugin"]).started == []
            without = local_stack.up(plugins=[])
            assert without.changed == ["--plugin"] and without.worker_pid != first.worker_pid
            recorded = _settled(without.worker_pid)
            with pytest.raises(PluginError, match="no_such_plugin_module"):
                local_stack.up(plugins=["no_such_plugin_module"])
            assert json.loads((home / "worker.pid").read_text()) == recorded  # left running as it was
        finally:
            assert local_stack.down() == ["worker"]
