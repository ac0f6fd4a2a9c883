"""Workspaces on a real dev server with the real sandbox: the six tools, a seed copied in, snapshots
at turn ends, a lost host's folder restored, a fork at an earlier turn, a SIGKILL mid-`bash`."""

from __future__ import annotations

import asyncio
import os
import shutil
import signal
import subprocess
import sys
import uuid
from pathlib import Path
from typing import Any

import httpx
import pytest
from pydantic_ai.messages import ModelResponse, ToolCallPart, ToolReturnPart
from temporalio.client import WorkflowFailureError

from agentwolf.cli.forks import effect_lines
from agentwolf.client.wolf_client import WolfClient
from agentwolf.config.manifest import Manifest
from agentwolf.config.policy import WorkerPolicy, WorkspacePolicy
from agentwolf.hosts import workspaces
from agentwolf.workflows.types import workflow_id
from tests.conftest import record_history, wait_for, worker_process
from tests.support.models import Script, sequence, text, tool
from tests.support.openai_server import Reply, ScriptedOpenAI
from tests.support.polls import idle, tool_returns
from tests.support.processes import end
from tests.support.serving import serving

WOLF = str(Path(sys.executable).parent / "wolf")
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
        # The session closed: its folder is gone from the host, its snapshots are not.
        assert not workspaces.folder("default", workflow_id("default", sid)).exists()
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
        # Turns 3 and 4's commands are in the ledger as contained: the fork's files are turn 2's.
        assert [(e.turn_id, e.tool, e.contained) for e in fork.effects] == [
            ("turn-3", "bash", True),
            ("turn-4", "bash", True),
        ]
        assert effect_lines(fork.effects, "the fork")[1].startswith(
            "workspace changes after the cut, contained"
        )
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


def openai_workspace_manifest(base_url: str) -> Manifest:
    return Manifest.model_validate(
        {
            "host": {"models": {"providers": {"openai": {"api_key": "k", "base_url": base_url}}}},
            "agents": {"a": {"model": "openai:gpt-4o-mini", "workspace": {}}},
        }
    )


async def test_a_worker_killed_mid_bash_is_never_rerun_and_the_model_is_told(
    env, wolf, task_queue, tmp_path, wolf_home
):
    """Turn 1 writes a file (snapshot 1); turn 2's command is cut by a SIGKILL after its first write:
    the next attempt does not run it again, puts the folder back as of turn 1 and says so."""
    plan = iter(
        [
            Reply(tool_calls=[("write_file", {"path": "a.txt", "content": "one"})]),
            Reply(text="turn one done"),
            Reply(tool_calls=[("bash", {"command": "echo partial > b.txt; sleep 120; echo never > c.txt"})]),
            Reply(tool_calls=[("bash", {"command": "ls"})]),
            Reply(text="turn two done"),
        ]
    )
    with ScriptedOpenAI(lambda request: next(plan)) as server:
        manifest = openai_workspace_manifest(server.base_url)
        extra = {"WOLF_HOME": str(wolf_home)}
        first, second = worker_process(env, task_queue, extra), None
        try:
            sid = await wolf.start_session("a", manifest, prompt="one")
            await wait_for(lambda: idle(wolf, sid, 1), timeout=120)
            await wolf.prompt(sid, "two")
            folder = workspaces.folder("default", workflow_id("default", sid))
            await wait_for(lambda: (folder / "b.txt").exists(), timeout=120)
            first.send_signal(signal.SIGKILL)
            first.wait()
            second = worker_process(env, task_queue, extra)
            await wait_for(lambda: idle(wolf, sid, 2), timeout=120)
            transcript = await wolf.transcript(sid)
        finally:
            for proc in (first, second):
                if proc is not None:
                    end(proc)
    cut, listed = [p.content for p in tool_returns(transcript)][1:]
    assert (
        cut == "interrupted by a worker loss; the workspace is as of turn 1 (the command was not run again)"
    )
    assert listed == "exit code 0\na.txt"  # consistent: the cut command's partial write is gone
    assert not (folder / "c.txt").exists()


def coding_policy() -> WorkerPolicy:
    """The test's own Python (with pytest) readable in the sandbox, as an operator would allow a toolchain."""
    venv = Path(sys.prefix)
    base = Path(os.path.realpath(sys.executable)).parent.parent
    return WorkerPolicy(
        workspaces=WorkspacePolicy(read_only=[str(venv), str(base)], path=[str(venv / "bin")])
    )


async def test_a_scripted_coding_session_makes_a_failing_test_pass(wolf, run_worker, tmp_path, env):
    """Reads, edits and runs pytest in the sandbox until the test passes; `wolf workspace diff`
    shows the fix."""
    project = tmp_path / "calc"
    project.mkdir()
    (project / "calc.py").write_text("def add(a, b):\n    return a - b\n")
    (project / "test_calc.py").write_text(
        "from calc import add\n\n\ndef test_add():\n    assert add(2, 3) == 5\n"
    )
    pytest_run = ("bash", {"command": "python -m pytest -q -p no:cacheprovider"})

    def decide(s: Script) -> ModelResponse:
        """The next step from what the last tool answered (a coding agent's loop, scripted)."""
        results = tool_returns(s.requests[-1][-1:])
        last = results[-1].content if results else ""
        if s.calls == 1 or last.startswith("replaced"):
            return tool(*pytest_run, f"t{s.calls}")
        if "1 failed" in last:
            return tool("read_file", {"path": "calc.py"}, f"r{s.calls}")
        if last.startswith("def add"):
            return tool("edit_file", {"path": "calc.py", "old_string": "a - b", "new_string": "a + b"}, "e")
        return text("the tests pass" if "1 passed" in last else f"stuck: {last}")

    script = Script(decide)
    async with run_worker(local_models={"m": script.model}, policy=coding_policy()):
        sid = await wolf.submit("make the tests pass", "a", manifest(), workspace=project)
        result = await wolf.result(sid)
        address = env.client.service_client.config.target_host
        cli = {**os.environ, "TEMPORAL_ADDRESS": address, "NO_COLOR": "1"}
        # The CLI in its own process, while this one's worker answers the session's snapshot query.
        proc = await asyncio.create_subprocess_exec(
            WOLF, "workspace", "diff", sid, env=cli, stdout=subprocess.PIPE, stderr=subprocess.PIPE
        )
        stdout, stderr = await asyncio.wait_for(proc.communicate(), 120)
    assert result.output == "the tests pass"
    assert proc.returncode == 0, stderr.decode()
    assert stdout.decode() == (
        "--- a/calc.py\n+++ b/calc.py\n@@ -1,2 +1,2 @@\n"
        " def add(a, b):\n-    return a - b\n+    return a + b\n"
    )
    assert (project / "calc.py").read_text() == "def add(a, b):\n    return a - b\n"  # a copy was changed


async def test_a_code_mode_script_calls_the_workspace_tools(wolf, run_worker):
    code = 'await write_file(path="x.txt", content="hi")\nprint(await bash(command="cat x.txt; ls"))'
    script = Script(sequence(tool("run_code", {"code": code}, "rc"), text("done")))
    agent = {"model": "local:m", "workspace": {}, "capabilities": [{"code_mode": {}}]}
    async with run_worker(local_models={"m": script.model}):
        sid = await wolf.submit("work", "a", Manifest.model_validate({"agents": {"a": agent}}))
        await wolf.result(sid)
        assert await wolf.workspace_read(sid, "x.txt") == b"hi"
    assert script.offered[0] >= {"run_code"} and "bash" not in script.offered[0]
    assert returns(script)["rc"].content == "exit code 0\nhix.txt\n"  # cat: no newline after "hi"


async def test_what_a_sessions_command_cannot_reach_or_exceed(wolf, run_worker, tmp_path, monkeypatch):
    """The hostile cases of tests/test_workspace_sandbox.py, through a session on the dev server."""
    secret = tmp_path / "worker-secret.txt"
    secret.write_text("s3cret")
    secret.chmod(0o644)
    monkeypatch.setenv("WOLF_TEST_WORKER_SECRET", "sk-worker-only-0123456789")
    home = os.path.expanduser("~")
    reach = "import urllib.request as u; u.urlopen('http://127.0.0.1:9/', timeout=5)"
    script = Script(
        sequence(
            step(
                ("home", "bash", {"command": f'ls -A "{home}" | head -3; cat "{secret}"'}),
                ("write", "bash", {"command": f'echo x > "{tmp_path}/planted"; echo x > /usr/planted'}),
                ("net", "bash", {"command": f'python3 -c "{reach}"'}),
                ("env", "bash", {"command": "env"}),
                ("cpu", "bash", {"command": "while :; do :; done"}),
                ("fsize", "bash", {"command": "head -c 3000000 /dev/zero > big"}),
            ),
            text("done"),
        )
    )
    async with run_worker(local_models={"m": script.model}):
        sid = await wolf.submit("probe", "a", manifest(cpu_s=1, file_mb=1))
        await wolf.result(sid)
    got = {k: v.content for k, v in returns(script).items()}
    assert "No such file or directory" in got["home"] and "s3cret" not in got["home"]
    # /usr is read-only; the folders above the workspace are the sandbox's own (not the host's).
    assert (
        "/usr/planted: Read-only file system" in got["write"] and "planted: Permission denied" in got["write"]
    )
    assert not (tmp_path / "planted").exists() and not Path("/usr/planted").exists()
    assert "Connection refused" in got["net"] and got["net"].startswith("exit code 1")
    assert "sk-worker-only" not in got["env"] and "WOLF_TEST" not in got["env"]
    assert got["cpu"] == "the command used its 1 s of CPU time and was stopped"
    assert got["fsize"] == (
        "the command wrote a file past the 1 MB limit and was stopped\n[stderr]\nFile size limit exceeded"
    )


async def test_the_console_shows_a_sessions_files_by_turn(client, task_queue, run_worker, tmp_path):
    tenant = f"files-{uuid.uuid4().hex[:6]}"
    wolf = WolfClient(client, task_queue=task_queue, tenant=tenant)
    script = Script(
        sequence(tool("write_file", {"path": "src/<b>.txt", "content": "a <b>"}, "w"), text("ok"))
    )
    async with (
        run_worker(local_models={"m": script.model}),
        serving(client, task_queue, manifest(), open_tenant=tenant) as base,
        httpx.AsyncClient(base_url=base, timeout=60) as http,
    ):
        sid = await wolf.submit("work", "a", manifest(), workspace=seed(tmp_path))
        await wolf.result(sid)
        listed = await http.get(f"/console/sessions/{sid}/files", headers={"Accept": "text/html"})
        seeded = await http.get(f"/console/sessions/{sid}/files?at=0", headers={"Accept": "text/html"})
        shown = await http.get(
            f"/console/sessions/{sid}/files", params={"path": "src/<b>.txt"}, headers={"Accept": "text/html"}
        )
    assert listed.status_code == 200
    assert (
        "src/&lt;b&gt;.txt" in listed.text
        and "src/app.py" in listed.text
        and "<strong>1</strong>" in listed.text
    )
    assert "src/app.py" in seeded.text and "&lt;b&gt;.txt" not in seeded.text  # turn 0: the seed
    assert '<pre class="file">a &lt;b&gt;</pre>' in shown.text
