"""AG-UI on `wolf serve` against a real dev server and worker: the npm `@ag-ui/client` HttpAgent
(tests/agui/run.mjs) streams text and a tool call and answers an approval interrupt with a resumed
run; raw HTTP reattaches to a running turn, resumes with `Last-Event-ID` after the server process is
SIGKILLed mid-stream, and cannot reach another tenant's thread."""

from __future__ import annotations

import asyncio
import json
import os
import shutil
import signal
import subprocess
import sys
import uuid
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx2 as httpx
import pytest
import yaml

from agentwolf.client.wolf_client import WolfClient
from agentwolf.protocols import agui
from agentwolf.protocols.served import ApiError, Target
from agentwolf.worker.bootstrap import create_worker
from agentwolf.workflows.types import registry_id
from tests.conftest import TOOLS_SERVER, make_manifest, tools_server, wait_for
from tests.support.models import Script, sequence, text, tool, tools
from tests.support.serving import free_port, serving

ROOT = Path(__file__).parent.parent
NODE = shutil.which("node")
RUN_MJS = Path(__file__).parent / "agui" / "run.mjs"
WOLF = str(Path(sys.executable).parent / "wolf")
ANSWER = "The answer, streamed word by word, is forty two."

needs_node = pytest.mark.needs(
    NODE is not None and (ROOT / "node_modules" / "@ag-ui" / "client").exists(),
    "node and `npm install` (@ag-ui/client)",
)


async def _node(url: str, thread: str, prompt: str, *args: str) -> list[dict[str, Any]]:
    proc = await asyncio.create_subprocess_exec(
        NODE or "node",
        str(RUN_MJS),
        url,
        thread,
        prompt,
        *args,
        cwd=ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    out, err = await asyncio.wait_for(proc.communicate(), 120)
    assert proc.returncode == 0, err.decode()
    lines = [json.loads(line) for line in out.decode().splitlines() if line.strip()]
    failed = [line["failed"] for line in lines if "failed" in line]
    assert not failed, f"{failed}\n{err.decode()}"
    return lines


def _events(lines: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [line["event"] for line in lines if "event" in line]


def _text(events: list[dict[str, Any]]) -> str:
    return "".join(e["delta"] for e in events if e["type"] == "TEXT_MESSAGE_CONTENT")


def _types(events: list[dict[str, Any]]) -> list[str]:
    return [e["type"] for e in events]


@needs_node
async def test_http_agent_streams_text_and_a_tool_call(client, task_queue, run_worker):
    script = Script(sequence(tool("add", {"a": 20, "b": 22}, "call-add"), text(ANSWER)), chunk_delay=0.1)
    async with (
        run_worker(local_models={"m": script.model}),
        serving(client, task_queue, make_manifest()) as base,
    ):
        thread = f"t-{uuid.uuid4().hex[:8]}"
        lines = await _node(f"{base}/agui/a", thread, "add 20 and 22", "--key", "key-a")
        wolf = WolfClient(client, tenant="tenant-a", task_queue=task_queue)
        status = await wolf.status(thread)
    events = _events(lines)
    types = _types(events)
    assert types[0] == "RUN_STARTED" and types[-1] == "RUN_FINISHED"
    assert events[0]["threadId"] == thread and events[0]["protocolVersion"] == "1.0"
    # The tool call, whole, then its result, in the first step; the answer in the second.
    start = types.index("TOOL_CALL_START")
    assert types[start : start + 4] == [
        "TOOL_CALL_START",
        "TOOL_CALL_ARGS",
        "TOOL_CALL_END",
        "TOOL_CALL_RESULT",
    ]
    assert events[start]["toolCallName"] == "add" and events[start]["toolCallId"] == "call-add"
    assert json.loads(events[start + 1]["delta"]) == {"a": 20, "b": 22}
    assert events[start + 3]["content"] == "42"
    steps = [(e["type"], e["stepName"]) for e in events if e["type"].startswith("STEP_")]
    # In order: live text waits until the durable stream has reached the step before it.
    assert steps == [
        ("STEP_STARTED", "step 1"),
        ("STEP_FINISHED", "step 1"),
        ("STEP_STARTED", "step 2"),
        ("STEP_FINISHED", "step 2"),
    ], types
    # Text streamed in pieces that join to the answer once.
    assert types.count("TEXT_MESSAGE_CONTENT") > 3
    assert _text(events) == ANSWER
    assert events[-1]["result"] == ANSWER
    said = [m["content"] for m in lines[-1]["messages"] if m["role"] == "assistant" and m.get("content")]
    assert "".join(said) == ANSWER
    # The thread is the session; the run was its one turn.
    assert status.state == "idle" and status.counters.turns == 1 and script.calls == 2


@needs_node
@pytest.mark.parametrize("answer", ["approve", "deny"])
async def test_http_agent_answers_approval_interrupts_with_a_resumed_run(
    client, task_queue, run_worker, tmp_path, answer
):
    effects = tmp_path / "effects"
    manifest = make_manifest(
        {"permissions": {"rules": [{"tool": "record", "action": "confirm"}]}},
        mcp_servers={"tools": tools_server(WOLF_SIDE_EFFECTS=str(effects))},
    )
    script = Script(
        sequence(tools(("record", {"tag": "x"}), ("record", {"tag": "y"})), text("done with it")),
        chunk_delay=0.05,
    )
    async with run_worker(local_models={"m": script.model}), serving(client, task_queue, manifest) as base:
        lines = await _node(
            f"{base}/agui/a",
            f"t-{uuid.uuid4().hex[:8]}",
            "record x and y",
            "--key",
            "key-a",
            "--answer",
            answer,
        )
    runs = [line for line in lines if "run" in line]
    assert [len(r["interrupts"]) for r in runs] == [2, 0]
    # One interrupt per waiting call, after both calls were shown.
    assert [(i["id"], i["toolCallId"], i["reason"]) for i in runs[0]["interrupts"]] == [
        ("c0-record", "c0-record", "tool_approval"),
        ("c1-record", "c1-record", "tool_approval"),
    ]
    assert runs[0]["interrupts"][0]["metadata"]["agentwolf"] == {"tool": "record", "args": {"tag": "x"}}
    events = _events(lines)
    finished = [e for e in events if e["type"] == "RUN_FINISHED"]
    assert finished[0]["outcome"]["type"] == "interrupt" and "outcome" not in finished[1]
    types = _types(events)
    first = types[: types.index("RUN_FINISHED") + 1]
    assert first.count("TOOL_CALL_END") == 2 and "TOOL_CALL_RESULT" not in first  # waiting: no results yet
    second = events[len(first) :]
    assert second[0]["type"] == "RUN_STARTED" and second[-1]["type"] == "RUN_FINISHED"
    results = {e["toolCallId"]: e["content"] for e in second if e["type"] == "TOOL_CALL_RESULT"}
    assert set(results) == {"c0-record", "c1-record"}
    assert _text(events) == "done with it"
    if answer == "approve":
        assert sorted(effects.read_text().split()) == ["x", "y"]
    else:
        assert not effects.exists() and all(r.startswith("denied by the user") for r in results.values())


# -- raw HTTP -------------------------------------------------------------------------------------


@dataclass
class Stream:
    events: list[dict[str, Any]] = field(default_factory=list)
    ids: list[str] = field(default_factory=list)
    comments: list[str] = field(default_factory=list)


async def _sse(
    response: httpx.Response,
) -> AsyncIterator[tuple[str | None, dict[str, Any] | None, str | None]]:
    """(id, event, comment) per dispatched SSE event or comment line."""
    event_id, data = None, []
    async for line in response.aiter_lines():
        if line.startswith(":"):
            yield None, None, line[1:].strip()
        elif line.startswith("id:"):
            event_id = line[3:].strip()
        elif line.startswith("data:"):
            data.append(line[5:].strip())
        elif not line and data:
            yield event_id, json.loads("\n".join(data)), None
            event_id, data = None, []


def _run_input(thread: str, prompt: str = "go") -> dict[str, Any]:
    return {
        "threadId": thread,
        "runId": uuid.uuid4().hex,
        "messages": [{"id": uuid.uuid4().hex, "role": "user", "content": prompt}],
        "tools": [],
        "context": [],
        "state": {},
        "forwardedProps": {},
    }


async def _read(
    http: httpx.AsyncClient,
    path: str,
    body: dict[str, Any],
    stream: Stream,
    *,
    until: int | None = None,
    **headers: str,
) -> int:
    """Read a run into `stream` (stop after `until` TEXT_MESSAGE_CONTENT events); the HTTP status."""
    async with http.stream("POST", path, json=body, headers=headers, timeout=60) as response:
        if response.status_code != 200:
            stream.comments.append(
                (await response.aread()).decode(errors="replace")
            )  # why, for the assertion
            return response.status_code
        contents = 0
        async for event_id, event, comment in _sse(response):
            if comment is not None:
                stream.comments.append(comment)
                continue
            assert event is not None and event_id, "every event carries an id"
            stream.events.append(event)
            stream.ids.append(event_id)
            contents += event["type"] == "TEXT_MESSAGE_CONTENT"
            if until is not None and contents >= until:
                break
        return 200


def _check_sequence(events: list[dict[str, Any]]) -> None:
    """What @ag-ui/client's verifier requires: opened once, closed once, nothing after the end."""
    open_messages: set[str] = set()
    open_steps: set[str] = set()
    assert events[0]["type"] == "RUN_STARTED"
    for e in events[1:-1]:
        assert e["type"] not in ("RUN_STARTED", "RUN_FINISHED", "RUN_ERROR")
        if e["type"] == "TEXT_MESSAGE_START":
            assert e["messageId"] not in open_messages
            open_messages.add(e["messageId"])
        elif e["type"] == "TEXT_MESSAGE_CONTENT":
            assert e["messageId"] in open_messages
        elif e["type"] == "TEXT_MESSAGE_END":
            open_messages.remove(e["messageId"])
        elif e["type"] == "STEP_STARTED":
            assert e["stepName"] not in open_steps
            open_steps.add(e["stepName"])
        elif e["type"] == "STEP_FINISHED":
            open_steps.remove(e["stepName"])
    assert events[-1]["type"] == "RUN_FINISHED" and not open_messages and not open_steps


async def test_a_thread_of_the_same_agent_name_from_another_config_is_refused(client, task_queue, run_worker):
    """A session of agent `a` from registry config `private` is not a thread of the served config's
    `a`: a key that may use the served `a` gets 404 (as for a missing thread) and the session gets
    no prompt."""
    wolf = WolfClient(client, tenant="tenant-a", task_queue=task_queue)
    script = Script(sequence(text(ANSWER)))
    async with (
        run_worker(local_models={"m": script.model}),
        serving(client, task_queue, make_manifest()) as base,
        httpx.AsyncClient(base_url=base) as http,
    ):
        name = f"private-{uuid.uuid4().hex[:6]}"
        await wolf.config_push(name, make_manifest())
        sid = await wolf.start_session("a", config_name=name)
        refused = await http.post("/agui/a", json=_run_input(sid), headers={"Authorization": "Bearer key-a"})
        assert refused.status_code == 404 and refused.json()["error"]["code"] == "not_found"
        assert name not in refused.text
        status = await wolf.status(sid)
        assert status.counters.turns == 0 and status.queued == 0 and script.calls == 0
        await wolf.close(sid)
        # Its registry would outlive this test's worker: tenant-a's /v1/models would wait on it.
        await client.get_workflow_handle(registry_id("tenant-a", name)).terminate("test done")


async def test_a_second_run_reattaches_and_another_tenant_gets_404(
    client, task_queue, run_worker, monkeypatch
):
    monkeypatch.setattr(agui, "PING", 0.3)
    script = Script(sequence(text(ANSWER)), delay=1.0, chunk_delay=0.15)
    async with (
        run_worker(local_models={"m": script.model}),
        serving(client, task_queue, make_manifest()) as base,
        httpx.AsyncClient(base_url=base) as http,
    ):
        thread = f"t-{uuid.uuid4().hex[:8]}"
        a, b = {"Authorization": "Bearer key-a"}, {"Authorization": "Bearer key-b"}
        first = Stream()
        assert await _read(http, "/agui/a", _run_input(thread), first, until=2, **a) == 200
        # The model waited a second before its first token: the idle stream had heartbeats.
        assert "ping" in first.comments
        # Another tenant: not by the id of A's stream, not by A's full session id.
        assert (
            await _read(
                http, "/agui/a", _run_input(thread), Stream(), **b, **{"Last-Event-ID": first.ids[-1]}
            )
            == 404
        )
        assert await _read(http, "/agui/a", _run_input(f"wolf/tenant-a/{thread}"), Stream(), **b) == 404
        # The disconnect left the turn running; the same message again (a reconnect) streams that
        # turn from its start.
        again = Stream()
        assert await _read(http, "/agui/a", _run_input(thread), again, **a) == 200
        wolf = WolfClient(client, tenant="tenant-a", task_queue=task_queue)
        status, calls = await wolf.status(thread), script.calls
        bad = await http.post("/agui/a", json={"threadId": thread}, headers=a)
        wrong_agent = await http.post("/agui/nope", json=_run_input(thread), headers=a)
        as_text = await http.post(
            "/agui/a", content=json.dumps(_run_input(thread)), headers={**a, "Content-Type": "text/plain"}
        )
        bad_id = await http.post("/agui/a", json=_run_input(thread), headers={**a, "Last-Event-ID": "1.2.3"})

        # The next run is a new turn; interrupting it ends the run as cancelled.
        interrupted = Stream()
        assert await _read(http, "/agui/a", _run_input(thread, "more"), interrupted, until=1, **a) == 200
        await wolf.interrupt(thread, "enough")
        assert (
            await _read(
                http,
                "/agui/a",
                _run_input(thread),
                interrupted,
                **a,
                **{"Last-Event-ID": interrupted.ids[-1]},
            )
            == 200
        )
    _check_sequence(again.events)
    assert _text(again.events) == ANSWER
    assert status.counters.turns == 1 and calls == 1  # no second prompt
    assert bad.status_code == 400 and bad.json()["error"]["code"] == "invalid_run_input"
    assert wrong_agent.status_code == 404
    assert as_text.status_code == 415 and bad_id.status_code == 400
    _check_sequence(interrupted.events)
    assert interrupted.events[0]["metadata"]["agentwolf"]["turn_id"] == "turn-2"
    assert interrupted.events[-1]["outcome"] == {"type": "cancelled"}


async def test_last_event_id_resumes_after_the_server_process_is_killed(client, tmp_path):
    address = client.service_client.config.target_host
    config = tmp_path / "config.yaml"
    config.write_text(
        yaml.safe_dump(
            {
                "host": {"mcp_servers": {"tools": {"command": sys.executable, "args": [TOOLS_SERVER]}}},
                "agents": {"a": {"model": "local:m", "capabilities": [{"mcp": "tools"}]}},
            }
        )
    )
    answer = " ".join([ANSWER] * 3)
    script = Script(sequence(text(answer)), chunk_delay=0.2)  # about 6 s: the second server comes up mid-turn
    queue = f"tq-{uuid.uuid4().hex[:8]}"  # its own queue: earlier tests' sessions and workers stay on theirs
    worker, hosts = create_worker(client, task_queue=queue, local_models={"m": script.model})
    thread = f"t-{uuid.uuid4().hex[:8]}"
    body = _run_input(thread, "tell me")
    async with worker:
        try:
            first_server, first = await _wolf_serve(address, config, queue), Stream()
            try:
                async with httpx.AsyncClient(base_url=first_server[1]) as http:
                    assert await _read(http, "/agui/a", body, first, until=3) == 200, first.comments
            finally:
                first_server[0].send_signal(signal.SIGKILL)
                first_server[0].wait(10)
            second_server, rest = await _wolf_serve(address, config, queue), Stream()
            try:
                async with httpx.AsyncClient(base_url=second_server[1]) as http:
                    assert await _read(http, "/agui/a", body, rest, **{"Last-Event-ID": first.ids[-1]}) == 200
                    # The run's last id resumes to nothing more.
                    after = Stream()
                    assert await _read(http, "/agui/a", body, after, **{"Last-Event-ID": rest.ids[-1]}) == 200
            finally:
                second_server[0].terminate()
                second_server[0].wait(10)
        finally:
            await hosts.close()
    assert "RUN_STARTED" not in _types(rest.events)  # the same run, carried on
    assert "TEXT_MESSAGE_START" not in _types(rest.events)  # and the same message
    events = first.events + rest.events
    _check_sequence(events)
    assert _text(events) == answer
    assert after.events == []


async def _wolf_serve(address: str, config: Path, queue: str) -> tuple[subprocess.Popen[bytes], str]:
    port = free_port()
    proc = subprocess.Popen(  # noqa: ASYNC220 - started once, killed by the test
        [
            WOLF,
            "serve",
            "--no-auth",
            "--port",
            str(port),
            "--config",
            str(config),
            "--address",
            address,
            "--task-queue",
            queue,
        ],
        env={**os.environ, "TEMPORAL_ADDRESS": address, "NO_COLOR": "1"},
        stdout=subprocess.DEVNULL,
        stderr=(config.parent / f"serve-{port}.log").open("wb"),
    )
    base = f"http://127.0.0.1:{port}"

    async def up() -> bool:
        if proc.poll() is not None:
            raise AssertionError(f"wolf serve exited: {(config.parent / f'serve-{port}.log').read_text()}")
        try:
            async with httpx.AsyncClient() as http:
                return (await http.get(f"{base}/healthz")).status_code == 200
        except httpx.HTTPError:
            return False

    await wait_for(up, timeout=60, interval=0.1)
    return proc, base


def test_every_position_resumes_to_exactly_the_rest_of_the_run():
    """The translation is a function of (position, session event): from any event's id, the same
    session events give exactly the events after it (what makes Last-Event-ID exact)."""
    from datetime import UTC, datetime

    from agentwolf.protocols.agui import Context, Where, translate
    from agentwolf.protocols.cursor import Cursor
    from agentwolf.workflows.types import Event, Usage

    def ev(kind: str, step: int = 0, **fields: Any) -> Event:
        return Event(kind=kind, at=datetime.now(UTC), turn_id="turn-3", step=step, **fields)

    source = [
        ev("turn_started", text="go"),
        ev("compiled"),
        ev("text_delta", 1, attempt=1, index=0, text="Let me "),
        ev("attempt_superseded", 1, attempt=1),
        ev("text_delta", 1, attempt=2, index=0, text="I will "),
        ev("text_delta", 1, attempt=2, index=7, text="add."),
        ev("model_text", 1, text="I will add."),
        ev("tool_call_started", 1, tool="add", call_id="c1", args={"a": 1}),
        ev("tool_call_started", 1, tool="add", call_id="c2", args={"a": 2}),
        ev("tool_progress", 1, call_id="c1"),
        ev("tool_call_finished", 1, call_id="c1", text="1"),
        ev("tool_call_finished", 1, call_id="c2", text="2"),
        ev("text_delta", 2, attempt=1, index=0, text="Done"),
        ev("text_delta", 2, attempt=None, index=4, text=": 3"),
        ev("model_text", 2, text="Done: 3"),
        Event(kind="config_changed", at=datetime.now(UTC)),
        ev(
            "turn_finished",
            2,
            text="Done: 3",
            outcome="completed",
            usage=Usage(input_tokens=5, output_tokens=3),
        ),
    ]
    cursors = [
        Cursor(n) for n in range(len(source) + 1)
    ]  # distinct, chained: event n moves cursor n to n + 1
    ctx = Context(thread_id="t", run_id="r", session_id="t")

    def run(where: Where, start: int) -> list[tuple[str, dict[str, Any]]]:
        out = []
        for n in range(start, len(source)):
            events, where = translate(where, cursors[n + 1], source[n], ctx)
            out += [(str(w), e.model_dump(mode="json", by_alias=True)) for e, w in events]
            if where.ended:
                break
        return out

    whole = run(Where(cursors[0], "turn-3"), 0)
    _check_sequence([{"type": "RUN_STARTED"}, *(e for _, e in whole)])
    assert _text([e for _, e in whole]) == "Let me I will add.Done: 3"
    ends = [e for _, e in whole if e["type"] == "TEXT_MESSAGE_END"]
    assert [e.get("metadata") for e in ends] == [{"agentwolf": {"superseded": True}}, None, None]
    assert whole[-1][1]["type"] == "RUN_FINISHED" and whole[-1][1]["usage"][0]["totalTokens"] == 8
    for k, (position, _) in enumerate(whole):
        where = Where.parse(position)
        start = cursors.index(where.cursor)
        assert run(where, start) == whole[k + 1 :], f"resuming after event {k} ({position})"


async def test_a_thread_the_served_config_cannot_start_keeps_the_config_to_the_log(wolf):
    """F16: a start the served config refuses (here an agent a new version dropped after the request's
    targets were read) answers 400 without the config's own account (its other agents' names); a
    thread id the caller got wrong still says why."""
    manifest = make_manifest(agent={"description": "the private agent"})
    with pytest.raises(ApiError) as dropped:
        await agui._session(wolf, Target("gone", "gone", {"manifest": manifest}), f"t-{uuid.uuid4().hex[:8]}")
    assert dropped.value.status == 400
    assert "'a'" not in dropped.value.message and "agents" not in dropped.value.message
    with pytest.raises(ApiError) as wrong_id:
        await agui._session(wolf, Target("a", "a", {"manifest": manifest}), "x/y")
    assert wrong_id.value.status == 400 and "no '/'" in wrong_id.value.message
