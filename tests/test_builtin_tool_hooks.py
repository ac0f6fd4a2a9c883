"""The agent's capability tool hooks run around workspace and memory tool calls too, inside
`wolf.workspace` and `wolf.memory`: a hook that refuses `write_file` keeps the file unwritten and
the model reads why; the hooks run once per call, counted outside the worker (a file)."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from agentwolf.plugins import load_plugins
from tests.conftest import make_manifest
from tests.support.models import Script
from tests.test_memory_session import _ask, _commands

PLUGIN = "tests.support.hook_counter"

pytestmark = pytest.mark.skipif(shutil.which("bwrap") is None, reason="bubblewrap is not installed")


async def test_tool_hooks_run_around_workspace_and_memory_calls(wolf, run_worker, tmp_path: Path):
    counts = tmp_path / "hooks"
    manifest = make_manifest(
        {
            "workspace": {},
            "memory": {"tools": "both"},
            "capabilities": [
                {"CountHooks": {"path": str(counts)}},
                {"Raises": {"hook": "before_tool_execute", "when": "write_file"}},
            ],
        },
        memory={"store": f"sqlite:///{tmp_path / 'memory.db'}"},
    )
    script = Script(_commands)
    plugins = load_plugins([PLUGIN], entry_points=[])
    async with run_worker(local_models={"m": script.model}, plugins=plugins):
        sid = await wolf.start_session("a", manifest, owner="alice")
        written = await _ask(wolf, sid, "write_file", path="a.txt", content="hi")
        read = await _ask(wolf, sid, "read_file", path="a.txt")
        kept = await _ask(wolf, sid, "remember", text="Alice likes green tea", kind="user")
        await wolf.close(sid)
    assert (
        written
        == "a capability's hook refused the call to write_file: PermissionError: write_file is not for today"
    )
    assert read.startswith("no such file")  # the refused write never ran
    assert kept == "kept as m1"
    ran = [line.split()[0] for line in counts.read_text().splitlines()]
    assert ran.count("before_tool_execute") == 3  # once per call, in its activity
