"""`wolf acp` as a subprocess, driven by the ACP SDK's client side (`spawn_agent_process`) against the
test dev server and a worker: a streamed turn with a tool call and slash commands (refreshed on hot
reload), cancel, permission round trips, a `wolf acp` SIGKILLed mid-turn and the session loaded from
a new one, and hostile input on the raw pipe."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import sys
import uuid
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.support.needs import import_or_skip

import_or_skip("acp", "the acp extra (pip install -e '.[acp]')")

from acp import PROTOCOL_VERSION, RequestError, spawn_agent_process, text_block  # noqa: E402
from acp.schema import AllowedOutcome, DeniedOutcome, McpServerStdio, RequestPermissionResponse  # noqa: E402
from acp.transports import spawn_stdio_transport  # noqa: E402

from agentwolf.client.wolf_client import WolfClient  # noqa: E402
from agentwolf.workflows.types import workflow_id  # noqa: E402
from tests.conftest import TOOLS_SERVER, record_history, wait_for  # noqa: E402
from tests.support.models import Script, sequence, text, tool  # noqa: E402
from tests.support.skills import write_skill  # noqa: E402

WOLF = str(Path(sys.executable).parent / "wolf")
ANSWER = "The answer, streamed word by word, is forty two."


class Editor:
    """The client side: records every update, answers permission requests from `answers`."""

    def __init__(self, answers: list[str] | None = None) -> None:
        self.updates: list[tuple[str, Any]] = []
        self.asked: list[Any] = []
        self.answers = list(answers or [])

    async def session_update(self, session_id: str, update: Any, **_: Any) -> None:
        self.updates.append((session_id, update))

    async def request_permission(self, session_id: str, tool_call: Any, options: list[Any], **_: Any) -> Any:
        self.asked.append((tool_call, options))
        answer = self.answers.pop(0) if self.answers else "cancelled"
        if answer == "cancelled":
            return RequestPermissionResponse(outcome=DeniedOutcome(outcome="cancelled"))
        return RequestPermissionResponse(outcome=AllowedOutcome(outcome="selected", option_id=answer))

    def kinds(self) -> list[str]:
        return [u.session_update for _, u in self.updates]

    def of(self, kind: str) -> list[Any]:
        return [u for _, u in self.updates if u.session_update == kind]

    def said(self) -> str:
        return "".join(u.content.text for u in self.of("agent_message_chunk"))


def _config(tmp_path: Path, agent: dict[str, Any] | None = None, **env: str) -> Path:
    config = tmp_path / f"wolf-{uuid.uuid4().hex[:6]}.yaml"
    tools = {"command": sys.executable, "args": [TOOLS_SERVER], "env": env}
    spec = {"model": "local:m", "capabilities": [{"mcp": "tools"}], **(agent or {})}
    config.write_text(yaml.safe_dump({"host": {"mcp_servers": {"tools": tools}}, "agents": {"a": spec}}))
    return config


def _args(client: Any, task_queue: str, config: Path, *extra: str) -> list[str]:
    address = client.service_client.config.target_host
    return [
        "acp",
        "-a",
        "a",
        "--config",
        str(config),
        "--address",
        address,
        "--task-queue",
        task_queue,
        *extra,
    ]


@asynccontextmanager
async def _wolf_acp(client: Any, task_queue: str, config: Path, editor: Editor) -> AsyncIterator[Any]:
    log = (config.parent / f"acp-{uuid.uuid4().hex[:6]}.log").open("wb")
    async with spawn_agent_process(
        editor,
        WOLF,
        *_args(client, task_queue, config),
        env={**os.environ, "NO_COLOR": "1"},
        transport_kwargs={"stderr": log},
    ) as (conn, proc):
        init = await asyncio.wait_for(conn.initialize(protocol_version=PROTOCOL_VERSION), 60)
        assert init.agent_capabilities.load_session
        yield conn, proc


async def test_a_streamed_turn_with_a_tool_call_and_commands(client, task_queue, run_worker, tmp_path):
    skills = tmp_path / "skills"
    write_skill(skills, "review")
    script = Script(sequence(tool("add", {"a": 20, "b": 22}, "call-add"), text(ANSWER)), chunk_delay=0.05)
    editor = Editor()
    config = _config(tmp_path, {"capabilities": [{"mcp": "tools"}, {"skills": [str(skills)]}]})
    async with (
        run_worker(local_models={"m": script.model}),
        _wolf_acp(client, task_queue, config, editor) as (
            conn,
            _,
        ),
    ):
        session = await conn.new_session(cwd=str(tmp_path), mcp_servers=[])
        sid = session.session_id
        done = await asyncio.wait_for(conn.prompt(session_id=sid, prompt=[text_block("add 20 and 22")]), 60)
        assert done.stop_reason == "end_turn"
        first = editor.of("available_commands_update")
        # Hot reload: a new skill is a new command once the session recompiles (its next turn).
        write_skill(skills, "deploy")
        wolf = WolfClient(client, task_queue=task_queue)
        async for _, event in wolf.events(sid, live=False):  # the worker noticed, and told the session
            if event.kind == "extensions_changed":
                break
        again = await asyncio.wait_for(conn.prompt(session_id=sid, prompt=[text_block("again")]), 60)
        await wait_for(lambda: "deploy" in _commands(editor))
    kinds = editor.kinds()
    start = kinds.index("tool_call")
    call = editor.of("tool_call")[0]
    assert (
        call.tool_call_id == "call-add"
        and call.title.startswith("add(")
        and call.raw_input == {"a": 20, "b": 22}
    )
    finished = editor.of("tool_call_update")[0]
    assert finished.tool_call_id == "call-add" and finished.status == "completed"
    assert finished.content[0].content.text == "42"
    # The answer streamed in pieces after the tool call, joining to it once (twice: two turns).
    chunks = [i for i, k in enumerate(kinds) if k == "agent_message_chunk"]
    assert chunks[0] > start and len(chunks) > 6
    assert editor.said() == ANSWER * 2
    assert len({c.message_id for c in editor.of("agent_message_chunk")}) == 2  # one message per answer
    assert "user_message_chunk" not in kinds  # the editor's own prompts are not echoed back
    assert [c.name for c in first[-1].available_commands] == ["review"]
    assert again.stop_reason == "end_turn"


def _commands(editor: Editor) -> set[str]:
    updates = editor.of("available_commands_update")
    return {c.name for c in updates[-1].available_commands} if updates else set()


async def test_cancel_interrupts_the_turn(client, task_queue, run_worker, tmp_path):
    script = Script(sequence(text(" ".join(["word"] * 200))), chunk_delay=0.1)
    editor = Editor()
    async with (
        run_worker(local_models={"m": script.model}),
        _wolf_acp(client, task_queue, _config(tmp_path), editor) as (conn, _),
    ):
        sid = (await conn.new_session(cwd=str(tmp_path), mcp_servers=[])).session_id
        turn = asyncio.create_task(conn.prompt(session_id=sid, prompt=[text_block("talk")]))
        await wait_for(lambda: len(editor.of("agent_message_chunk")) >= 3)
        await conn.cancel(session_id=sid)
        done = await asyncio.wait_for(turn, 30)
        status = await WolfClient(client, task_queue=task_queue).status(sid)
    assert done.stop_reason == "cancelled"
    assert status.state == "idle" and status.last_outcome == "interrupted"


async def test_permission_round_trips(client, task_queue, run_worker, tmp_path):
    effects = tmp_path / "effects"
    script = Script(
        sequence(
            tool("record", {"tag": "x"}, "c1"),
            text("refused"),
            tool("record", {"tag": "y"}, "c2"),
            text("recorded"),
            tool("record", {"tag": "z"}, "c3"),
            text("recorded again"),
        )
    )
    rules = {"permissions": {"rules": [{"tool": "record", "action": "confirm"}]}}
    editor = Editor(answers=["reject", "always"])
    config = _config(tmp_path, rules, WOLF_SIDE_EFFECTS=str(effects))
    async with (
        run_worker(local_models={"m": script.model}),
        _wolf_acp(client, task_queue, config, editor) as (
            conn,
            _,
        ),
    ):
        sid = (await conn.new_session(cwd=str(tmp_path), mcp_servers=[])).session_id
        reasons = []
        for prompt in ("record x", "record y", "record z"):
            done = await asyncio.wait_for(conn.prompt(session_id=sid, prompt=[text_block(prompt)]), 60)
            reasons.append(done.stop_reason)
    assert reasons == ["end_turn"] * 3
    # Asked twice: the third call is allowed for the rest of the session.
    assert [call.tool_call_id for call, _ in editor.asked] == ["c1", "c2"]
    assert [o.kind for o in editor.asked[0][1]] == ["allow_once", "allow_always", "reject_once"]
    assert editor.asked[0][0].raw_input == {"tag": "x"} and editor.asked[0][0].status == "pending"
    ends = {
        u.tool_call_id: u.status for u in editor.of("tool_call_update") if u.status in ("completed", "failed")
    }
    assert ends == {"c1": "failed", "c2": "completed", "c3": "completed"}
    assert effects.read_text().split() == ["y", "z"]


async def test_a_killed_wolf_acp_leaves_the_turn_running_and_load_shows_all_of_it(
    client, task_queue, run_worker, tmp_path
):
    answer = " ".join([ANSWER] * 3)
    script = Script(sequence(tool("add", {"a": 1, "b": 2}, "call-add"), text(answer)), chunk_delay=0.15)
    config = _config(tmp_path)
    wolf = WolfClient(client, task_queue=task_queue)
    first, second = Editor(), Editor()
    async with run_worker(local_models={"m": script.model}):
        async with _wolf_acp(client, task_queue, config, first) as (conn, proc):
            sid = (await conn.new_session(cwd=str(tmp_path), mcp_servers=[])).session_id
            turn = asyncio.create_task(conn.prompt(session_id=sid, prompt=[text_block("add 1 and 2")]))
            await wait_for(lambda: len(first.of("agent_message_chunk")) >= 3, timeout=60)
            proc.send_signal(signal.SIGKILL)
            await proc.wait()
            with pytest.raises((ConnectionError, RequestError)):
                await turn
        async with _wolf_acp(client, task_queue, config, second) as (conn, _):
            await conn.load_session(cwd=str(tmp_path), session_id=sid, mcp_servers=[])
            await wait_for(lambda: second.said() == answer, timeout=60)
            status = await wolf.status(sid)
            await asyncio.sleep(0.5)  # nothing more comes
    assert 0 < len(first.said()) < len(answer) and answer.startswith(first.said())
    assert [u.content.text for u in second.of("user_message_chunk")] == ["add 1 and 2"]
    assert [u.tool_call_id for u in second.of("tool_call")] == ["call-add"]
    assert [(u.tool_call_id, u.status) for u in second.of("tool_call_update")] == [("call-add", "completed")]
    assert second.said() == answer
    assert status.counters.turns == 1 and status.last_outcome == "completed"


async def _exchange(
    writer: asyncio.StreamWriter, reader: asyncio.StreamReader, line: bytes, timeout: float = 30
) -> dict[str, Any]:
    writer.write(line if line.endswith(b"\n") else line + b"\n")
    await writer.drain()
    answer = await asyncio.wait_for(reader.readline(), timeout)
    assert answer, "wolf acp closed its output"
    return json.loads(answer)


def _request(request_id: Any, method: str, params: Any) -> bytes:
    return json.dumps({"jsonrpc": "2.0", "id": request_id, "method": method, "params": params}).encode()


async def test_hostile_input_gets_protocol_errors_never_a_crash(client, task_queue, tmp_path):
    other = WolfClient(client, tenant="other-tenant", task_queue=task_queue)
    theirs = await other.start_session("a", _config(tmp_path))
    log = tmp_path / "acp.log"
    async with spawn_stdio_transport(
        WOLF,
        *_args(client, task_queue, _config(tmp_path)),
        env={**os.environ, "NO_COLOR": "1"},
        stderr=log.open("wb"),
        limit=64 * 1024 * 1024,
    ) as (reader, writer, proc):
        ask = lambda line: _exchange(writer, reader, line)  # noqa: E731
        assert "result" in await ask(_request(0, "initialize", {"protocolVersion": 1}))
        codes = {
            "not json": (await ask(b"{not json"))["error"]["code"],
            "array": (await ask(b"[1, 2]"))["error"]["code"],
            "no method": (await ask(b'{"jsonrpc": "2.0", "params": {}}'))["error"]["code"],
            "object id": (await ask(b'{"jsonrpc": "2.0", "id": {"a": 1}, "method": "initialize"}'))["error"][
                "code"
            ],
            "bad error": (await ask(b'{"jsonrpc": "2.0", "id": 7, "error": "boom"}'))["error"]["code"],
            "unknown method": (await ask(_request(1, "no/such", {})))["error"]["code"],
            "bad params": (await ask(_request(2, "session/new", "x")))["error"]["code"],
            "huge": (await ask(_request(3, "initialize", {"x": "y" * (9 * 1024 * 1024)})))["error"]["code"],
            "wrong session": (await ask(_request(4, "session/load", _load("no-such-session"))))["error"][
                "code"
            ],
            "other tenant": (await ask(_request(5, "session/load", _load(theirs))))["error"]["code"],
            "other tenant by workflow id": (
                await ask(_request(6, "session/load", _load(f"wolf/other-tenant/{theirs}")))
            )["error"],
            "not open": (await ask(_request(7, "session/prompt", _prompt("no-such-session"))))["error"][
                "code"
            ],
        }
        alive = await ask(_request(8, "initialize", {"protocolVersion": 1}))
        writer.write_eof()
        assert await asyncio.wait_for(proc.wait(), 30) == 0
    refused = codes.pop("other tenant by workflow id")
    assert codes == {
        "not json": -32700,
        "array": -32600,
        "no method": -32600,
        "object id": -32600,
        "bad error": -32600,
        "unknown method": -32601,
        "bad params": -32602,
        "huge": -32600,
        "wrong session": -32002,
        "other tenant": -32002,
        "not open": -32602,
    }
    assert refused["code"] == -32002 and "other-tenant" not in json.dumps(refused["message"])
    assert alive["result"]["protocolVersion"] == 1
    assert "Traceback" not in log.read_text()


def _load(session_id: str) -> dict[str, Any]:
    return {"sessionId": session_id, "cwd": "/", "mcpServers": []}


def _prompt(session_id: str) -> dict[str, Any]:
    return {"sessionId": session_id, "prompt": [{"type": "text", "text": "hi"}]}


def _stdio_server(name: str) -> McpServerStdio:
    return McpServerStdio(name=name, command=sys.executable, args=[TOOLS_SERVER], env=[])


def _session_labels(hosts: Any) -> list[str]:
    return [label for host in hosts.hosts() for label in host.pool.servers if label.startswith("session:")]


async def test_the_editors_mcp_servers_join_its_session_only(client, task_queue, run_worker, tmp_path):
    config = tmp_path / "bare.yaml"
    config.write_text(yaml.safe_dump({"agents": {"a": {"model": "local:m"}}}))
    script = Script(sequence(tool("add", {"a": 20, "b": 22}, "call-add"), text(ANSWER), text("plain")))
    editor = Editor()
    wolf = WolfClient(client, task_queue=task_queue)
    async with (
        run_worker(local_models={"m": script.model}) as hosts,
        _wolf_acp(client, task_queue, config, editor) as (conn, _),
    ):
        mine = (await conn.new_session(cwd=str(tmp_path), mcp_servers=[_stdio_server("tools")])).session_id
        other = (await conn.new_session(cwd=str(tmp_path), mcp_servers=[])).session_id
        for sid in (mine, other):
            done = await asyncio.wait_for(conn.prompt(session_id=sid, prompt=[text_block("add")]), 60)
            assert done.stop_reason == "end_turn"
        # Reattaching with a server: it joins that session from its next step on.
        await conn.load_session(cwd=str(tmp_path), session_id=other, mcp_servers=[_stdio_server("more")])
        await asyncio.wait_for(conn.prompt(session_id=other, prompt=[text_block("again")]), 60)
        started = _session_labels(hosts)
        await wolf.close(mine)  # its server stops with it; the other session keeps its own
        await wait_for(lambda: len(_session_labels(hosts)) == 1)
        left = _session_labels(hosts)
        await record_history(client, workflow_id(wolf.tenant, mine), "session_servers")
    assert [u.status for u in editor.of("tool_call_update")] == ["completed"]
    assert editor.of("tool_call_update")[0].content[0].content.text == "42"
    assert "add" in script.offered[0] and "add" not in script.offered[2] and "add" in script.offered[3]
    assert len(started) == 2 and left[0].startswith("session:more@")


async def test_the_worker_policy_refuses_an_editors_server(client, task_queue, run_worker, tmp_path):
    from agentwolf.config.policy import WorkerPolicy

    config = tmp_path / "bare.yaml"
    config.write_text(yaml.safe_dump({"agents": {"a": {"model": "local:m"}}}))
    script = Script(sequence(text("never")))
    policy = WorkerPolicy(commands=["/bin/true"])
    async with (
        run_worker(local_models={"m": script.model}, policy=policy),
        _wolf_acp(client, task_queue, config, Editor()) as (conn, _),
    ):
        sid = (await conn.new_session(cwd=str(tmp_path), mcp_servers=[_stdio_server("tools")])).session_id
        with pytest.raises(RequestError) as refused:
            await asyncio.wait_for(conn.prompt(session_id=sid, prompt=[text_block("hi")]), 60)
    assert "not allowed by the worker policy" in str(refused.value.data)
    assert script.calls == 0


async def test_loading_another_users_session_joins_none_of_the_editors_servers(
    client, task_queue, run_worker, tmp_path
):
    config = tmp_path / "bare.yaml"
    config.write_text(yaml.safe_dump({"agents": {"a": {"model": "local:m"}, "b": {"model": "local:m"}}}))
    script = Script(sequence(text("one"), text("two")))
    wolf = WolfClient(client, task_queue=task_queue)
    async with (
        run_worker(local_models={"m": script.model}) as hosts,
        _wolf_acp(client, task_queue, config, Editor()) as (conn, _),
    ):
        # Someone else's session (started here by the SDK, for no editor user), of the agent and
        # config this editor serves: the editor loads it, passing its own server.
        theirs = await wolf.start_session("a", config)
        await conn.load_session(cwd=str(tmp_path), session_id=theirs, mcp_servers=[_stdio_server("bobs")])
        done = await asyncio.wait_for(conn.prompt(session_id=theirs, prompt=[text_block("hi")]), 60)
        compiled = await client.get_workflow_handle(workflow_id(wolf.tenant, theirs)).query("compiled")
        # A session of another agent is as unknown here as a missing one.
        other = await wolf.start_session("b", config)
        with pytest.raises(RequestError) as refused:
            await conn.load_session(cwd=str(tmp_path), session_id=other, mcp_servers=[_stdio_server("x")])
        labels = _session_labels(hosts)
    assert done.stop_reason == "end_turn" and compiled["session_servers"] == {} and labels == []
    assert "env" not in script.offered[0]  # the editor's server was never offered in their session
    assert refused.value.code == -32002


async def test_an_editors_server_token_reaches_the_server_but_not_the_session_history(
    client, task_queue, run_worker, tmp_path
):
    from acp.schema import EnvVariable

    canary = "ghp_EDITOR_CANARY_0123456789"
    config = tmp_path / "bare.yaml"
    config.write_text(yaml.safe_dump({"agents": {"a": {"model": "local:m"}}}))
    script = Script(sequence(tool("env", {"name": "GH_TOKEN"}, "call-env"), text("done")))
    editor = Editor()
    server = McpServerStdio(
        name="gh",
        command=sys.executable,
        args=[TOOLS_SERVER],
        env=[EnvVariable(name="GH_TOKEN", value=canary)],
    )
    async with (
        run_worker(local_models={"m": script.model}),
        _wolf_acp(client, task_queue, config, editor) as (conn, _),
    ):
        sid = (await conn.new_session(cwd=str(tmp_path), mcp_servers=[server])).session_id
        await asyncio.wait_for(conn.prompt(session_id=sid, prompt=[text_block("token?")]), 60)
        handle = client.get_workflow_handle(workflow_id("default", sid))
        compiled = str(await handle.query("compiled"))
        history = await handle.fetch_history()
    assert editor.of("tool_call_update")[0].content[0].content.text == "****"  # it had it, redacted
    assert [e.event_type for e in history.events if canary.encode() in e.SerializeToString()] == []
    assert canary not in compiled and "sealed:" in compiled


async def test_fork_a_session_from_the_editor(client, task_queue, run_worker, tmp_path):
    """`session/fork` after the step of a message id the editor saw: the fork shows the source's
    prefix on `session/load`, takes the editor's server, and its turns leave the source as it was.
    Another tenant's, another agent's or an unknown session is not found, and nothing starts."""
    config = tmp_path / "bare.yaml"
    config.write_text(yaml.safe_dump({"agents": {"a": {"model": "local:m"}, "b": {"model": "local:m"}}}))
    script = Script(
        sequence(text("one"), text("two"), tool("add", {"a": 1, "b": 2}, "call-add"), text("three")),
        chunk_delay=0.01,
    )
    wolf = WolfClient(client, task_queue=task_queue)
    other = WolfClient(client, tenant="other-tenant", task_queue=task_queue)
    theirs = await other.start_session("a", config)
    agent_b = await wolf.start_session("b", config)
    editor = Editor()
    async with (
        run_worker(local_models={"m": script.model}),
        _wolf_acp(client, task_queue, config, editor) as (conn, _),
    ):
        sid = (await conn.new_session(cwd=str(tmp_path), mcp_servers=[])).session_id
        for prompt in ("first", "second"):
            await asyncio.wait_for(conn.prompt(session_id=sid, prompt=[text_block(prompt)]), 60)
        source = await wolf.transcript(sid)
        said_one = next(c.message_id for c in editor.of("agent_message_chunk") if c.content.text == "one")
        codes = {}
        for name, target, meta in (
            ("unknown", "no-such-session", {}),
            ("other tenant", theirs, {}),
            ("other tenant by workflow id", f"wolf/other-tenant/{theirs}", {}),
            ("other agent", agent_b, {}),
            ("no such turn", sid, {"at": "9"}),
            ("not a point", sid, {"at": 5}),
            ("not an object", sid, "1"),
        ):
            with pytest.raises(RequestError) as refused:
                await conn.fork_session(cwd=str(tmp_path), session_id=target, mcp_servers=[], agentwolf=meta)
            codes[name] = refused.value.code
        fork = (
            await conn.fork_session(
                cwd=str(tmp_path),
                session_id=sid,
                mcp_servers=[_stdio_server("tools")],
                agentwolf={"at": said_one},
            )
        ).session_id
        done = await asyncio.wait_for(conn.prompt(session_id=fork, prompt=[text_block("add")]), 60)
        seen = len(editor.updates)
        await conn.load_session(cwd=str(tmp_path), session_id=fork, mcp_servers=[])
        loaded = [u for s, u in editor.updates[seen:] if s == fork]
        after = await wolf.transcript(sid)
        query = f"TaskQueue = '{task_queue}' AND WolfTenant = 'default'"
        started = await wait_for(lambda: _listed_with(client, query, workflow_id("default", fork)))
    assert said_one == "turn-1.1.0" and fork != sid and done.stop_reason == "end_turn"
    assert codes == {
        "unknown": -32002,
        "other tenant": -32002,
        "other tenant by workflow id": -32002,
        "other agent": -32002,
        "no such turn": -32602,
        "not a point": -32602,
        "not an object": -32602,
    }
    shown = [
        (u.session_update, u.content.text if hasattr(u.content, "text") else u.status)
        for u in loaded
        if u.session_update in ("user_message_chunk", "agent_message_chunk", "tool_call_update")
    ]
    assert shown == [
        ("user_message_chunk", "first"),
        ("agent_message_chunk", "one"),
        ("user_message_chunk", "add"),
        ("tool_call_update", "completed"),
        ("agent_message_chunk", "three"),
    ]
    assert "add" in script.offered[2]  # the editor's server joined the fork
    assert _dump(after) == _dump(source) and len(source) == 4  # the source is as it was
    assert sorted(started) == sorted(workflow_id("default", s) for s in (sid, agent_b, fork))


async def _listed_with(client: Any, query: str, wid: str) -> list[str] | None:
    """The workflow ids `query` lists, once visibility shows `wid` among them."""
    ids = [w.id async for w in client.list_workflows(query)]
    return ids if wid in ids else None


def _dump(messages: Any) -> bytes:
    from pydantic_ai.messages import ModelMessagesTypeAdapter

    return ModelMessagesTypeAdapter.dump_json(messages)
