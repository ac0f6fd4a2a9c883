"""A2A on `wolf serve` against a real dev server and worker, driven by the a2a-sdk client: the agent
card, a streamed turn with a tool call, cancel, an approval round trip through input-required, a
SIGKILLed `wolf serve` and a resubscribe from a new process, hostile input."""

from __future__ import annotations

import asyncio
import contextlib
import json
import signal
import sys
import uuid
from collections.abc import AsyncIterator
from typing import Any

import httpx
import pytest
import yaml
from a2a.client import A2AClientError, Client, ClientConfig, ClientFactory
from a2a.helpers import get_data_parts, new_data_part
from a2a.types.a2a_pb2 import (
    CancelTaskRequest,
    GetTaskRequest,
    Message,
    Part,
    Role,
    SendMessageRequest,
    StreamResponse,
    SubscribeToTaskRequest,
    TaskState,
)
from a2a.utils.errors import InvalidParamsError, TaskNotCancelableError

from agentwolf.client.wolf_client import WolfClient
from agentwolf.worker.bootstrap import create_worker
from tests.conftest import TOOLS_SERVER, make_manifest, tools_server, wait_for
from tests.support.models import Script, sequence, text, tool
from tests.support.processes import end
from tests.support.serving import serving
from tests.test_serve_agui import _wolf_serve

ANSWER = "Twenty and twenty two make forty two, as the tool said."


@contextlib.asynccontextmanager
async def a2a_client(
    base: str, agent: str = "a", key: str | None = "key-a", streaming: bool = True
) -> AsyncIterator[Client]:
    headers = {"Authorization": f"Bearer {key}"} if key else {}
    async with httpx.AsyncClient(headers=headers, timeout=60) as http:
        factory = ClientFactory(ClientConfig(httpx_client=http, streaming=streaming))
        client = await factory.create_from_url(f"{base}/a2a/{agent}")
        try:
            yield client
        finally:
            await client.close()


def message(text: str, *, context_id: str = "", task_id: str = "", data: Any = None) -> SendMessageRequest:
    parts = [Part(text=text)] if text else []
    if data is not None:
        parts.append(new_data_part(data))
    return SendMessageRequest(
        message=Message(
            message_id=uuid.uuid4().hex,
            role=Role.ROLE_USER,
            parts=parts,
            context_id=context_id,
            task_id=task_id,
        )
    )


class Seen:
    """A task's stream as a client assembles it: events, the answer artifact, status messages."""

    def __init__(self) -> None:
        self.events: list[StreamResponse] = []
        self.answer = ""
        self.chunks: list[tuple[bool, str]] = []
        self.notes: list[str] = []

    def add(self, event: StreamResponse) -> None:
        self.events.append(event)
        if event.HasField("artifact_update"):
            update = event.artifact_update
            chunk = "".join(p.text for p in update.artifact.parts)
            self.chunks.append((update.append, chunk))
            self.answer = self.answer + chunk if update.append else chunk
        elif event.HasField("status_update") and event.status_update.status.message.parts:
            self.notes.append(event.status_update.status.message.parts[0].text)

    @property
    def task_id(self) -> str:
        return self.events[0].task.id

    @property
    def state(self) -> int:
        last = self.events[-1]
        return last.status_update.status.state if last.HasField("status_update") else last.task.status.state


async def _read(stream: AsyncIterator[StreamResponse], seen: Seen) -> Seen:
    async for event in stream:
        seen.add(event)
    return seen


async def test_card_and_a_streamed_turn_with_a_tool_call(client, task_queue, run_worker):
    script = Script(sequence(tool("add", {"a": 20, "b": 22}, "call-add"), text(ANSWER)), chunk_delay=0.05)
    wolf = WolfClient(client, tenant="tenant-a", task_queue=task_queue)
    async with (
        run_worker(local_models={"m": script.model}),
        serving(client, task_queue, make_manifest({"instructions": "Adds numbers.\nUse the tools."})) as base,
    ):
        async with httpx.AsyncClient() as http:
            card_url = f"{base}/a2a/a/.well-known/agent-card.json"
            assert (await http.get(card_url)).status_code == 401
            card = (await http.get(card_url, headers={"Authorization": "Bearer key-a"})).json()
        assert card["name"] == "a" and card["capabilities"]["streaming"] is True
        assert card["description"] == "Adds numbers."
        assert {i["url"] for i in card["supportedInterfaces"]} == {f"{base}/a2a/a"}
        assert card["securitySchemes"]["wolf_api_key"]["httpAuthSecurityScheme"]["scheme"] == "bearer"
        assert card["skills"][0]["id"] == "a" and "tools" in card["skills"][0]["tags"]
        async with a2a_client(base) as c:
            seen = await _read(c.send_message(message("add 20 and 22")), Seen())
            task = await c.get_task(GetTaskRequest(id=seen.task_id))
            again = await _read(c.send_message(message("again", context_id=task.context_id)), Seen())
        status = await wolf.status(task.context_id)
    assert seen.events[0].task.status.state == TaskState.TASK_STATE_SUBMITTED
    assert any(n.startswith("calling add(") for n in seen.notes) and "add returned" in seen.notes
    assert seen.answer == ANSWER and len(seen.chunks) > 3
    assert not seen.chunks[0][0] and all(append for append, _ in seen.chunks[1:])
    assert seen.state == TaskState.TASK_STATE_COMPLETED
    assert task.status.state == TaskState.TASK_STATE_COMPLETED
    assert task.artifacts[0].parts[0].text == ANSWER and task.history[0].parts[0].text == "add 20 and 22"
    assert again.task_id.startswith("turn-2.") and again.events[0].task.context_id == task.context_id
    assert status.counters.turns == 2


async def test_v0_3_method_names(client, task_queue, run_worker):
    script = Script(sequence(text("hello there")))
    async with (
        run_worker(local_models={"m": script.model}),
        serving(client, task_queue, make_manifest()) as base,
        httpx.AsyncClient(base_url=base, headers={"Authorization": "Bearer key-a"}, timeout=60) as http,
    ):
        sent = await _rpc(
            http,
            "message/send",
            {"message": {"messageId": "m1", "role": "user", "parts": [{"kind": "text", "text": "hi"}]}},
        )
        got = await _rpc(http, "tasks/get", {"id": sent["result"]["id"]})
    assert sent["result"]["status"]["state"] == "completed"
    assert got["result"]["artifacts"][0]["parts"][0]["text"] == "hello there"


async def _rpc(
    http: httpx.AsyncClient, method: str, params: Any, path: str = "/a2a/a", **headers: str
) -> Any:
    body = {"jsonrpc": "2.0", "id": 1, "method": method, "params": params}
    response = await http.post(path, json=body, headers=headers)
    assert response.status_code == 200, response.text
    if response.headers["content-type"].startswith("text/event-stream"):  # a stream: its first event
        return json.loads(response.text.partition("data:")[2].partition("\r\n")[0])
    return response.json()


async def test_cancel_interrupts_the_turn(client, task_queue, run_worker):
    script = Script(sequence(tool("slow", {"seconds": 30}), text("never")))
    wolf = WolfClient(client, tenant="tenant-a", task_queue=task_queue)
    async with (
        run_worker(local_models={"m": script.model}),
        serving(client, task_queue, make_manifest()) as base,
        a2a_client(base) as c,
    ):
        seen = Seen()
        reading = asyncio.create_task(_read(c.send_message(message("be slow")), seen))
        await wait_for(lambda: any(n.startswith("calling slow") for n in seen.notes), 60)
        canceled = await c.cancel_task(CancelTaskRequest(id=seen.task_id))
        await asyncio.wait_for(reading, 60)
        with pytest.raises(TaskNotCancelableError, match="not running"):
            await c.cancel_task(CancelTaskRequest(id=seen.task_id))
        status = await wolf.status(canceled.context_id)
    assert canceled.status.state == TaskState.TASK_STATE_CANCELED
    assert seen.state == TaskState.TASK_STATE_CANCELED
    assert status.last_outcome == "interrupted"


async def test_approval_round_trip_through_input_required(client, task_queue, run_worker, tmp_path):
    effects = tmp_path / "effects"
    manifest = make_manifest(
        {"permissions": {"rules": [{"tool": "record", "action": "confirm"}]}},
        mcp_servers={"tools": tools_server(WOLF_SIDE_EFFECTS=str(effects))},
    )
    script = Script(sequence(tool("record", {"tag": "x"}, "call-rec"), text("recorded it")))
    async with (
        run_worker(local_models={"m": script.model}),
        serving(client, task_queue, manifest) as base,
        a2a_client(base, streaming=False) as c,
    ):
        [first] = [e async for e in c.send_message(message("record x"))]
        task = first.task
        waiting = get_data_parts(list(task.status.message.parts))[0]["approvals"]
        with pytest.raises(InvalidParamsError, match="approve"):
            _ = [e async for e in c.send_message(message("maybe", task_id=task.id))]
        assert not effects.exists()
        polled = await c.get_task(GetTaskRequest(id=task.id))
        async with a2a_client(base) as streaming:
            answered = await _read(
                streaming.send_message(message("", task_id=task.id, data={"approve": True})), Seen()
            )
    assert task.status.state == TaskState.TASK_STATE_INPUT_REQUIRED
    assert waiting == [{"call_id": "call-rec", "tool": "record", "args": {"tag": "x"}}]
    assert polled.status.state == TaskState.TASK_STATE_INPUT_REQUIRED
    assert answered.task_id == task.id and answered.answer == "recorded it"
    assert answered.state == TaskState.TASK_STATE_COMPLETED
    assert effects.read_text() == "x\n"


async def test_resubscribe_from_a_new_wolf_serve_after_the_first_is_killed(client, tmp_path):
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
    # Slow (a word a second) until the second server has resubscribed: it comes up mid-turn however
    # loaded the machine is; then the rest streams quickly.
    script = Script(sequence(text(answer)), chunk_delay=1.0)
    queue = f"tq-{uuid.uuid4().hex[:8]}"
    worker, hosts = create_worker(client, task_queue=queue, local_models={"m": script.model})
    first, rest = Seen(), Seen()
    async with worker:
        try:
            proc, base = await _wolf_serve(address, config, queue)
            try:
                async with a2a_client(base, key=None) as c:
                    with contextlib.suppress(A2AClientError, httpx.HTTPError):
                        async for event in c.send_message(message("tell me")):
                            first.add(event)
                            if len(first.chunks) == 3:
                                proc.send_signal(signal.SIGKILL)
            finally:
                proc.kill()
                proc.wait(10)
            proc, base = await _wolf_serve(address, config, queue)
            try:
                async with a2a_client(base, key=None) as c:
                    async for event in c.subscribe(SubscribeToTaskRequest(id=first.task_id)):
                        rest.add(event)
                        script.chunk_delay = 0.05
            finally:
                end(proc)
            wolf = WolfClient(client, tenant="default", task_queue=queue)
            status = await wolf.status(first.events[0].task.context_id)
        finally:
            await hosts.close()
    assert len(first.chunks) == 3 and answer.startswith(first.answer) and first.answer != answer
    assert rest.events[0].task.id == first.task_id
    assert rest.events[0].task.status.state == TaskState.TASK_STATE_WORKING
    assert not rest.chunks[0][0] and all(append for append, _ in rest.chunks[1:])
    assert "".join(chunk for _, chunk in rest.chunks) == answer  # the whole answer, nothing twice
    assert rest.state == TaskState.TASK_STATE_COMPLETED
    assert status.counters.turns == 1 and script.calls == 1


async def test_hostile_input_is_a_protocol_error(client, task_queue, run_worker):
    script = Script(sequence(text("ok")))
    async with (
        run_worker(local_models={"m": script.model}),
        serving(client, task_queue, make_manifest()) as base,
    ):
        async with a2a_client(base, key="key-b", streaming=False) as theirs:
            [done] = [e async for e in theirs.send_message(message("also mine"))]
        their_task_id, their_context = done.task.id, done.task.context_id
        async with httpx.AsyncClient(
            base_url=base, headers={"Authorization": "Bearer key-a"}, timeout=60
        ) as h:
            v1 = {"A2A-Version": "1.0"}
            broken = await h.post(
                "/a2a/a", content=b"{not json", headers={"Content-Type": "application/json"}
            )
            assert broken.status_code == 200 and broken.json()["error"]["code"] == -32700
            assert (await _rpc(h, "tasks/explode", {}))["error"]["code"] == -32601
            assert (await _rpc(h, "GetTask", {"id": "nope"}, **v1))["error"]["code"] == -32001
            assert (await _rpc(h, "tasks/get", {"id": "turn-1.0.nope"}))["error"]["code"] == -32001
            assert (await _rpc(h, "tasks/get", {"id": "turn-1.0.wolf/tenant-b/x"}))["error"]["code"] == -32001
            refusals = [
                await _rpc(h, "tasks/get", {"id": their_task_id}),
                await _rpc(h, "tasks/cancel", {"id": their_task_id}),
                await _rpc(h, "tasks/resubscribe", {"id": their_task_id}),
            ]
            assert all(r["error"]["code"] == -32001 for r in refusals), refusals
            huge = "x" * 300_000
            for params in (
                {"message": _msg(huge)},
                {"message": _msg("hi", contextId=their_context)},
                {"message": _msg("hi", contextId=f"wolf/tenant-b/{their_context}")},
                {"message": _msg("hi", taskId=their_task_id)},
                {"message": {"role": "user"}},
            ):
                refused = await _rpc(h, "message/send", params)
                assert refused["error"]["code"] in (-32600, -32602, -32001), refused
                assert "tenant-b" not in str(refused) and "also mine" not in str(refused)
            assert (await h.post("/a2a/a", content=b"x" * (2 << 20))).status_code == 413
            assert (await h.post("/a2a/nobody", json={})).status_code == 404
            assert (await h.get("/a2a/nobody/.well-known/agent-card.json")).status_code == 404
            assert (await h.post("/a2a/a", json={}, headers={"Authorization": ""})).status_code == 401
            ok = await _rpc(h, "message/send", {"message": _msg("hello")})
    assert ok["result"]["status"]["state"] == "completed"


def _msg(text: str, **fields: str) -> dict[str, Any]:
    return {
        "messageId": uuid.uuid4().hex,
        "role": "user",
        "parts": [{"kind": "text", "text": text}],
        **fields,
    }
