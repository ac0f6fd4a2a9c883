"""Workspaces on a real dev server with the real sandbox: the six tools, a seed copied in, snapshots
at turn ends, a lost host's folder restored, a fork at an earlier turn, a SIGKILL mid-`bash`."""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

import pytest
from pydantic_ai.messages import ModelResponse, ToolCallPart, ToolReturnPart
from temporalio.client import WorkflowFailureError

from agentwolf.config.manifest import Manifest
from agentwolf.hosts import workspaces
from agentwolf.workflows.types import workflow_id
from tests.conftest import record_history, wait_for
from tests.support.models import Script, sequence, text, tool
from tests.support.polls import idle, tool_returns

pytestmark = pytest.mark.skipif(shutil.which("bwrap") is None, reason="bubblewrap is not installed")


@pytest.fixture(autouse=True)
def wolf_home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """Workspace folders under this test's own data folder."""
    home = tmp_path / "wolf-home"
    monkeypatch.setenv("WOLF_HOME", str(home))
    return home


def manifest(**settings: Any) -> Manifest:
    return Manifest.model_validate({"agents": {"a": {"model": "local:m", "workspace": settings}}})


def returns(script: Script) -> dict[str, ToolReturnPart]:
    """The tool results the model saw, by call id (the last request holds them all)."""
    return {p.tool_call_id: p for p in tool_returns(script.requests[-1])}


APP = b"def greet(name):\n    return 'hello ' + name\n"


def seed(tmp_path: Path) -> Path:
    project = tmp_path / "project"
    (project / "src").mkdir(parents=True)
    (project / "src" / "app.py").write_bytes(APP)
    (project / "README.md").write_text("A tiny project.\nhello\n")
    return project


GREET = """'import src.app as a; print(a.greet("x"))'"""


def step(*calls: tuple[str, str, dict[str, Any]]) -> ModelResponse:
    """One model answer asking for `calls` (id, tool, arguments) at once."""
    return ModelResponse(parts=[ToolCallPart(name, args, tool_call_id=cid) for cid, name, args in calls])


async def test_the_six_tools(wolf, run_worker, tmp_path):
    script = Script(
        sequence(
            step(
                ("ls", "list_files", {"pattern": "**/*.py"}),
                ("read", "read_file", {"path": "src/app.py"}),
                ("grep", "grep", {"pattern": "hello"}),
            ),
            step(
                ("write", "write_file", {"path": "notes/todo.txt", "content": "one\ntwo\ntwo\n"}),
                ("edit", "edit_file", {"path": "src/app.py", "old_string": "hello ", "new_string": "hi "}),
            ),
            step(
                ("twice", "edit_file", {"path": "notes/todo.txt", "old_string": "two", "new_string": "2"}),
                ("absent", "edit_file", {"path": "notes/todo.txt", "old_string": "three", "new_string": "3"}),
                ("outside", "read_file", {"path": "../outside.txt"}),
            ),
            step(
                (
                    "run",
                    "bash",
                    {"command": f"cat notes/todo.txt; python3 -c {GREET}"},
                ),
                ("fails", "bash", {"command": "echo oops >&2; exit 3"}),
                ("slow", "bash", {"command": "sleep 30", "timeout_s": 1}),
            ),
            text("done"),
        )
    )
    async with run_worker(local_models={"m": script.model}):
        sid = await wolf.submit("work", "a", manifest(), workspace=seed(tmp_path))
        await wolf.result(sid)
        await record_history(wolf.client, workflow_id("default", sid), "workspace_tools")
        # The turn ended with a snapshot: what `wolf workspace` reads, whatever the host holds.
        assert [s.turn for s in await wolf.workspace_snapshots(sid)] == [0, 1]
        assert await wolf.workspace_read(sid, "notes/todo.txt") == b"one\ntwo\ntwo\n"
        assert await wolf.workspace_read(sid, "src/app.py", at=0) == APP
        diff = await wolf.workspace_diff(sid)
    assert (
        "-    return 'hello ' + name\n+    return 'hi ' + name\n" in diff and "+++ b/notes/todo.txt" in diff
    )
    assert {"read_file", "write_file", "edit_file", "list_files", "grep", "bash"} <= script.offered[0]
    got = returns(script)
    assert got["ls"].content == "src/app.py"
    assert got["read"].content == "def greet(name):\n    return 'hello ' + name\n"
    assert got["grep"].content == "README.md:2:hello\nsrc/app.py:2:    return 'hello ' + name"
    assert got["write"].content == "wrote 12 bytes to notes/todo.txt"
    assert got["edit"].content == "replaced 1 occurrence(s) in src/app.py"
    # The uniqueness rule, a missing string, a path outside: errors the model reads, nothing changed.
    assert "occurs 2 times in notes/todo.txt" in got["twice"].content
    assert "does not occur" in got["absent"].content
    assert "outside the workspace" in got["outside"].content
    assert got["run"].content == "exit code 0\none\ntwo\ntwo\nhi x"
    assert got["fails"].content == "exit code 3\n[stderr]\noops" and got["fails"].outcome == "failed"
    assert got["slow"].content.startswith("timed out after 1 s")


async def test_a_lost_hosts_folder_is_restored_from_the_last_snapshot(wolf, run_worker, tmp_path):
    script = Script(
        lambda s: {
            1: tool("write_file", {"path": "a.txt", "content": "turn one"}, "w1"),
            2: text("one"),
            3: tool("write_file", {"path": "b.txt", "content": "lost"}, "w2"),
            4: text("two"),
            5: tool("bash", {"command": "ls; cat a.txt"}, "b3"),
        }.get(s.calls, text("three"))
    )
    async with run_worker(local_models={"m": script.model}):
        sid = await wolf.start_session("a", manifest(), prompt="one")
        await wait_for(lambda: idle(wolf, sid, 1))
        await wolf.prompt(sid, "two")
        await wait_for(lambda: idle(wolf, sid, 2))
        # The host is lost: its folder is gone (and the snapshot of turn 2 with it, as if the
        # worker died before taking it: here, only the folder goes, so turn 2's snapshot stays).
        snapshots = await wolf.workspace_snapshots(sid)
        assert [s.turn for s in snapshots] == [1, 2]
        shutil.rmtree(workspaces.folder("default", workflow_id("default", sid)))
        await wolf.prompt(sid, "three")
        await wait_for(lambda: idle(wolf, sid, 3))
    restored = returns(script)["b3"].content
    assert restored.startswith(
        "(The host holding this workspace was lost: it was restored as it was at the end of turn 2"
    )
    assert restored.endswith("exit code 0\na.txt\nb.txt\nturn one")


async def test_a_fork_at_turn_2_of_4_sees_turn_2s_files(wolf, run_worker):
    def decide(s: Script) -> Any:
        turn = (s.calls + 1) // 2
        if s.calls % 2:
            return tool("bash", {"command": f"echo {turn} > turn.txt; echo {turn} > t{turn}.txt"}, f"b{turn}")
        return text(f"turn {turn}")

    script = Script(decide)
    async with run_worker(local_models={"m": script.model}):
        sid = await wolf.start_session("a", manifest(), prompt="p1")
        for n in (2, 3, 4):
            await wait_for(lambda n=n: idle(wolf, sid, n - 1))
            await wolf.prompt(sid, f"p{n}")
        await wait_for(lambda: idle(wolf, sid, 4))
        fork = await wolf.fork(sid, at="2")
        files = await wolf.workspace_files(fork.session_id)
        assert sorted(files) == ["t1.txt", "t2.txt", "turn.txt"]
        assert await wolf.workspace_read(fork.session_id, "turn.txt") == b"2\n"
        # Its first call restores turn 2's files in a folder of its own; the source keeps its own.
        forked = Script(sequence(tool("bash", {"command": "cat turn.txt; ls"}, "f1"), text("ok")))
    async with run_worker(local_models={"m": forked.model}):
        await wolf.prompt(fork.session_id, "look")
        await wait_for(lambda: idle(wolf, fork.session_id, 3))
        assert await wolf.workspace_read(sid, "turn.txt") == b"4\n"
    assert returns(forked)["f1"].content == "exit code 0\n2\nt1.txt\nt2.txt\nturn.txt"


async def test_a_rewind_restores_the_workspace_of_its_turn(wolf, run_worker):
    script = Script(
        lambda s: {
            1: tool("write_file", {"path": "f.txt", "content": "1"}, "w1"),
            3: tool("write_file", {"path": "f.txt", "content": "2"}, "w2"),
            5: tool("read_file", {"path": "f.txt"}, "r3"),
        }.get(s.calls, text("ok"))
    )
    async with run_worker(local_models={"m": script.model}):
        sid = await wolf.start_session("a", manifest(), prompt="one")
        await wait_for(lambda: idle(wolf, sid, 1))
        await wolf.prompt(sid, "two")
        await wait_for(lambda: idle(wolf, sid, 2))
        await wolf.rewind(sid, "1")
        await wolf.prompt(sid, "again")
        await wait_for(lambda: idle(wolf, sid, 3))
    assert returns(script)["r3"].content == "1"


async def test_a_worker_without_bubblewrap_refuses_workspace_agents(wolf, run_worker, monkeypatch):
    monkeypatch.setenv("PATH", "/nonexistent")
    script = Script(sequence(tool("bash", {"command": "true"}, "b"), text("done")))
    async with run_worker(local_models={"m": script.model}):
        sid = await wolf.submit("work", "a", manifest())
        with pytest.raises(WorkflowFailureError) as failed:
            await wolf.result(sid)
    assert str(failed.value.cause).endswith(
        "this worker cannot run workspace agents: bubblewrap is not installed (install the `bubblewrap` "
        "package, or let the worker policy run them unsandboxed with `workspaces: {sandbox: none}`)"
    )
