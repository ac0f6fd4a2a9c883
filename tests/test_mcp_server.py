"""AgentWolf as an MCP server against a real dev server and worker: `mcp.Client` over stdio (spawning
`wolf mcp`) and over streamable HTTP (wolf serve's /mcp): a streamed turn with a tool call, cancel,
an approval round trip, a killed `wolf mcp` and a retried call, hostile input."""

from __future__ import annotations

import contextlib
import os
import signal
import sys
import uuid
from pathlib import Path
from typing import Any

import anyio
import httpx2 as httpx
import pytest
import yaml
from mcp import Client, StdioServerParameters
from mcp.client.streamable_http import streamable_http_client
from mcp.shared.exceptions import MCPError

from agentwolf.client.wolf_client import WolfClient
from agentwolf.config.policy import ApiKeyEntry
from agentwolf.protocols.auth import ApiKeys, digest
from tests.conftest import make_manifest, wait_for
from tests.support.models import Script, sequence, text, tool
from tests.support.serving import serving

WOLF = str(Path(sys.executable).parent / "wolf")
ANSWER = "Twenty and twenty two make forty two, as the tool said."


def _stdio(env, task_queue: str, config: Path, tenant: str = "tenant-a") -> StdioServerParameters:
    address = env.client.service_client.config.target_host
    return StdioServerParameters(
        command=WOLF,
        args=["mcp", "--address", address, "--task-queue", task_queue, "--config", str(config)],
        env={**os.environ, "WOLF_TENANT": tenant},
    )


def _config(tmp_path: Path, **agent: Any) -> Path:
    path = tmp_path / "wolf.yaml"
    path.write_text(yaml.safe_dump(make_manifest(agent or None).model_dump(mode="json", exclude_none=True)))
    return path


def _http(base: str, key: str = "key-a") -> Any:
    return streamable_http_client(
        f"{base}/mcp", http_client=httpx.AsyncClient(headers={"Authorization": f"Bearer {key}"}, timeout=60)
    )


class Progress:
    def __init__(self) -> None:
        self.messages: list[str] = []

    async def __call__(self, progress: float, total: float | None, message: str | None) -> None:
        self.messages.append(message or "")


async def test_stdio_turn_streams_progress_and_a_tool_call(env, client, task_queue, run_worker, tmp_path):
    script = Script(sequence(tool("add", {"a": 20, "b": 22}, "call-add"), text(ANSWER)), chunk_delay=0.1)
    async with (
        run_worker(local_models={"m": script.model}),
        Client(_stdio(env, task_queue, _config(tmp_path))) as c,
    ):
        names = [t.name for t in (await c.list_tools()).tools]
        assert names == ["ask_a", "wolf_approve"]
        progress = Progress()
        result = await c.call_tool("ask_a", {"task": "add 20 and 22"}, progress_callback=progress)
        out = result.structured_content
        assert not result.is_error and out["status"] == "completed" and out["text"] == ANSWER
        assert result.content[0].text == ANSWER
        # Progress: the tool call, then the answer growing word by word to the whole answer.
        assert any(m.startswith("calling add(") for m in progress.messages), progress.messages
        texts = [m for m in progress.messages if ANSWER.startswith(m) and m]
        assert len(texts) > 3 and texts[-1] == ANSWER
        # The session is a resource: its transcript has the prompt and the tool's result.
        transcript = await c.read_resource(f"wolf://sessions/{out['session_id']}/transcript")
        body = transcript.contents[0].text
        assert "add 20 and 22" in body and "42" in body
        # A second call with the session id is a new turn of the same session.
        second = await c.call_tool("ask_a", {"task": "again", "session_id": out["session_id"]})
        assert second.structured_content["turn_id"] == "turn-2"
        status = await WolfClient(client, tenant="tenant-a", task_queue=task_queue).status(out["session_id"])
    assert status.counters.turns == 2


async def test_killed_stdio_server_and_a_retried_call(env, client, task_queue, run_worker, tmp_path):
    """SIGKILL `wolf mcp` mid-turn: the turn goes on; a new process called again with the session id
    and the same task returns that turn's answer, with no second turn."""
    script = Script(sequence(text(ANSWER)), chunk_delay=0.3)
    config = _config(tmp_path)
    wolf = WolfClient(client, tenant="tenant-a", task_queue=task_queue)
    async with run_worker(local_models={"m": script.model}):
        session_id = await wolf.start_session("a", make_manifest())
        seen = Progress()
        async with anyio.create_task_group() as tg:

            async def call() -> None:
                with contextlib.suppress(MCPError, ExceptionGroup):  # its server is killed
                    async with Client(_stdio(env, task_queue, config)) as c:
                        await c.call_tool(
                            "ask_a", {"task": "tell me", "session_id": session_id}, progress_callback=seen
                        )

            tg.start_soon(call)
            await wait_for(lambda: seen.messages, 60)
            for proc in _wolf_mcp_processes(task_queue):
                os.kill(proc, signal.SIGKILL)
        async with Client(_stdio(env, task_queue, config)) as c:
            result = await c.call_tool("ask_a", {"task": "tell me", "session_id": session_id})
            again = await c.call_tool("ask_a", {"task": "tell me", "session_id": session_id})
        status = await wolf.status(session_id)
    assert result.structured_content["text"] == ANSWER and result.structured_content["turn_id"] == "turn-1"
    assert again.structured_content == result.structured_content
    assert status.counters.turns == 1 and script.calls == 1


def _wolf_mcp_processes(task_queue: str) -> list[int]:
    found = []
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            cmdline = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
        except OSError:
            continue
        if b"mcp" in cmdline and task_queue.encode() in cmdline:
            found.append(int(pid))
    return found


async def test_http_cancel_interrupts_the_turn(client, task_queue, run_worker):
    # The tool outlasts every deadline here: only the cancel can end the turn.
    script = Script(sequence(tool("slow", {"seconds": 600}), text("never")))
    wolf = WolfClient(client, tenant="tenant-a", task_queue=task_queue)
    async with (
        run_worker(local_models={"m": script.model}),
        serving(client, task_queue, make_manifest()) as base,
        Client(_http(base)) as c,
    ):
        progress = Progress()
        with anyio.move_on_after(120):
            async with anyio.create_task_group() as tg:
                tg.start_soon(lambda: c.call_tool("ask_a", {"task": "be slow"}, progress_callback=progress))
                await wait_for(lambda: any("calling slow" in m for m in progress.messages), 120)
                tg.cancel_scope.cancel()
        # The session this call started: the only one on this test's queue (shared tenant-a has others).
        (session_id,) = await wait_for(lambda: _sessions_on(client, task_queue), 60)
        await wait_for(lambda: _outcome(wolf, session_id, "interrupted"), 120)
        status = await wolf.status(session_id)
    assert (status.state, status.last_outcome, status.counters.turns) == ("idle", "interrupted", 1)
    assert script.calls == 1  # the model was not asked again: the turn ended at the cancelled tool


async def _sessions_on(client: Any, task_queue: str) -> list[str]:
    return [wf.id.rsplit("/", 1)[1] async for wf in client.list_workflows(f"TaskQueue = '{task_queue}'")]


async def _outcome(wolf: WolfClient, session_id: str, outcome: str) -> bool:
    status = await wolf.status(session_id)
    return status.state == "idle" and status.last_outcome == outcome


async def test_http_approval_round_trip(client, task_queue, run_worker, tmp_path):
    effects = tmp_path / "effects"
    manifest = make_manifest(
        {"permissions": {"rules": [{"tool": "record", "action": "confirm"}]}},
        mcp_servers={"tools": {**_tools_env(effects)}},
    )
    script = Script(sequence(tool("record", {"tag": "x"}, "call-rec"), text("recorded it")))
    async with (
        run_worker(local_models={"m": script.model}),
        serving(client, task_queue, manifest) as base,
        Client(_http(base)) as c,
    ):
        first = await c.call_tool("ask_a", {"task": "record x"})
        out = first.structured_content
        assert out["status"] == "waiting_approval" and not first.is_error
        assert out["approvals"] == [{"call_id": "call-rec", "tool": "record", "args": {"tag": "x"}}]
        assert not effects.exists()
        done = await c.call_tool(
            "wolf_approve", {"session_id": out["session_id"], "call_id": "call-rec", "approved": True}
        )
    assert (
        done.structured_content["status"] == "completed" and done.structured_content["text"] == "recorded it"
    )
    assert effects.read_text() == "x\n"


def _tools_env(effects: Path) -> dict[str, Any]:
    from tests.conftest import tools_server

    return tools_server(WOLF_SIDE_EFFECTS=str(effects))


async def test_a_key_limited_to_other_agents_cannot_approve_in_this_agents_session(
    client, task_queue, run_worker
):
    """Same tenant, but the key may use agent `b` only: a session of `a` is not there for it."""
    keys = ApiKeys([ApiKeyEntry(sha256=digest("key-b-only"), tenant="tenant-a", agents=frozenset({"b"}))])
    mine = WolfClient(client, tenant="tenant-a", task_queue=task_queue)
    async with (
        run_worker(local_models={"m": Script(sequence(text("ok"))).model}),
        serving(client, task_queue, make_manifest(), keys=keys) as base,
    ):
        sid = await mine.start_session("a", make_manifest())
        async with Client(_http(base, "key-b-only")) as c:
            with pytest.raises(MCPError) as caught:
                await c.call_tool("wolf_approve", {"session_id": sid, "call_id": "c", "approved": True})
        assert "not found" in str(caught.value)
        await mine.close(sid)


async def test_hostile_input_is_a_protocol_error(client, task_queue, run_worker):
    script = Script(sequence(text("ok")))
    other = WolfClient(client, tenant="tenant-b", task_queue=task_queue)
    async with (
        run_worker(local_models={"m": script.model}),
        serving(client, task_queue, make_manifest()) as base,
    ):
        theirs = await other.start_session("a", make_manifest())
        async with Client(_http(base)) as c:
            for name, args, says in [
                ("ask_nobody", {"task": "x"}, "unknown tool"),
                ("ask_a", {"task": "x", "session_id": f"nope-{uuid.uuid4().hex[:6]}"}, "not found"),
                ("ask_a", {"task": "x", "session_id": theirs}, "not found"),
                ("ask_a", {"task": "x", "session_id": f"wolf/tenant-b/{theirs}"}, "not found"),
                ("ask_a", {"task": ""}, "task must be"),
                ("wolf_approve", {"session_id": theirs, "call_id": "c", "approved": True}, "not found"),
            ]:
                with pytest.raises(MCPError) as caught:
                    await c.call_tool(name, args)
                assert says in str(caught.value), (name, args, caught.value)
            with pytest.raises(MCPError):
                await c.read_resource(f"wolf://sessions/{theirs}/transcript")
            assert not any(theirs in str(r.uri) for r in (await c.list_resources()).resources)
            # Still serving after all that.
            ok = await c.call_tool("ask_a", {"task": "hello"})
            assert ok.structured_content["text"] == "ok"
        async with httpx.AsyncClient(base_url=base, headers={"Authorization": "Bearer key-a"}) as h:
            mcp_headers = {
                "Accept": "application/json, text/event-stream",
                "Content-Type": "application/json",
            }
            broken = await h.post("/mcp", content=b"{not json", headers=mcp_headers)
            assert 400 <= broken.status_code < 500
            huge = await h.post("/mcp", content=b"x" * (2 << 20), headers=mcp_headers)
            assert huge.status_code == 413
            anonymous = await h.post("/mcp", content=b"{}", headers={**mcp_headers, "Authorization": ""})
            assert anonymous.status_code == 401
            assert (await h.get("/healthz")).status_code == 200
