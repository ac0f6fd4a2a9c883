"""One rule for every path that names an existing session (issue 23): a key reaches a session only
if it may use that session's agent and config, and a session of a manifest file is the served
config's only if its manifest identity is the served one. Otherwise: not found, and nothing of the
session leaks. Real dev server, worker, `wolf serve` app; the official `openai`, MCP and HTTP clients."""

from __future__ import annotations

import json
import uuid

import httpx2 as httpx
import openai
import pytest
from mcp import Client
from mcp.shared.exceptions import MCPError
from openai import AsyncOpenAI
from pydantic_ai.messages import ModelMessage, ModelResponse, SystemPromptPart, TextPart
from pydantic_ai.models.function import AgentInfo, FunctionModel

from agentwolf.client.wolf_client import WolfClient
from agentwolf.config.manifest import Manifest
from agentwolf.config.policy import ApiKeyEntry
from agentwolf.protocols.auth import ApiKeys, digest
from agentwolf.protocols.openai_api import ResponseId
from tests.conftest import wait_for
from tests.support.serving import serving
from tests.test_a2a import _msg, _rpc
from tests.test_mcp_server import _http
from tests.test_serve_agui import _run_input

SECRET = "ADMIN agent: runbook secret 42"
OTHER = "OTHER FILE's pub"
SERVED = Manifest.model_validate(
    {
        "agents": {
            "pub": {"model": "local:m", "instructions": "PUBLIC helper"},
            "admin": {"model": "local:m", "instructions": SECRET},
        }
    }
)
OTHER_FILE = Manifest.model_validate({"agents": {"pub": {"model": "local:m", "instructions": OTHER}}})
KEYS = ApiKeys(
    [
        ApiKeyEntry(sha256=digest("full"), tenant="tenant-a"),
        ApiKeyEntry(sha256=digest("pub-only"), tenant="tenant-a", agents=frozenset({"pub"})),
    ]
)


async def _echo_instructions(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
    """Answers with the instructions it was given: an answer shows which agent ran."""
    system = [p.content for m in messages for p in getattr(m, "parts", []) if isinstance(p, SystemPromptPart)]
    given = [str(getattr(m, "instructions", "") or "") for m in messages]
    return ModelResponse(parts=[TextPart(f"answered by: {' '.join(system + given)[:80]}")])


def _api(base: str, key: str) -> AsyncOpenAI:
    return AsyncOpenAI(base_url=base + "/v1", api_key=key, max_retries=0)


def _leaks(text: str) -> bool:
    return SECRET in text or OTHER in text or "admin" in text


async def test_a_key_limited_to_an_agent_cannot_reach_other_agents_sessions_through_the_openai_api(
    client, task_queue, run_worker
):
    """F1: a key for agent `pub` names an `admin` session of its own tenant by response id or
    session id: every path answers 404 and the session is neither read, prompted nor cancelled."""
    wolf = WolfClient(client, tenant="tenant-a", task_queue=task_queue)
    async with (
        run_worker(local_models={"m": FunctionModel(_echo_instructions)}),
        serving(client, task_queue, SERVED, keys=KEYS) as base,
    ):
        full, pub = _api(base, "full"), _api(base, "pub-only")
        assert [m.id for m in (await pub.models.list()).data] == ["pub"]
        admin = await full.responses.create(model="admin", input="hello")
        assert SECRET in admin.output_text
        sid = ResponseId.parse(admin.id).session
        attempts = {
            "retrieve": lambda: pub.responses.retrieve(admin.id),
            "stream": lambda: pub.responses.retrieve(admin.id, stream=True),
            "cancel": lambda: pub.responses.cancel(admin.id),
            "previous_response_id": lambda: pub.responses.create(
                model="pub", input="print the runbook", previous_response_id=admin.id
            ),
            "X-Wolf-Session": lambda: pub.chat.completions.create(
                model="pub",
                messages=[{"role": "user", "content": "again"}],
                extra_headers={"X-Wolf-Session": sid},
            ),
        }
        for name, attempt in attempts.items():
            with pytest.raises(openai.NotFoundError) as refused:
                await attempt()
            assert not _leaks(str(refused.value.body)), name
        # A key that may use both still cannot prompt `admin`'s session as `pub`.
        with pytest.raises(openai.NotFoundError):
            await full.chat.completions.create(
                model="pub",
                messages=[{"role": "user", "content": "x"}],
                extra_headers={"X-Wolf-Session": sid},
            )
        status = await wolf.status(sid)
        assert status.counters.turns == 1 and status.queued == 0 and status.state != "done"
        # Its own key reads it, under the session's own agent.
        assert (await full.responses.retrieve(admin.id)).model == "admin"
        await wolf.close(sid)


async def test_a_session_of_another_manifest_file_is_not_the_served_configs_on_any_front_end(
    client, task_queue, run_worker
):
    """F2: a same-tenant session started from another manifest file whose agent is also `pub` is
    not a session of the served `pub`: OpenAI, AG-UI, A2A and MCP (ask, approve, transcript, list)
    all answer not found, and the session gets no prompt."""
    wolf = WolfClient(client, tenant="tenant-a", task_queue=task_queue)
    async with (
        run_worker(local_models={"m": FunctionModel(_echo_instructions)}),
        serving(client, task_queue, SERVED, keys=KEYS) as base,
        httpx.AsyncClient(base_url=base, headers={"Authorization": "Bearer pub-only"}, timeout=60) as http,
    ):
        other = await wolf.start_session("pub", OTHER_FILE, session_id=f"other-{uuid.uuid4().hex[:8]}")
        mine = await wolf.start_session("pub", SERVED)  # the served file's: reachable
        with pytest.raises(openai.NotFoundError):
            await _api(base, "pub-only").chat.completions.create(
                model="pub",
                messages=[{"role": "user", "content": "hi"}],
                extra_headers={"X-Wolf-Session": other},
            )
        agui = await http.post("/agui/pub", json=_run_input(other))
        assert agui.status_code == 404 and not _leaks(agui.text)
        a2a = await _rpc(http, "message/send", {"message": _msg("hi", contextId=other)}, path="/a2a/pub")
        assert "not found" in a2a["error"]["message"] and not _leaks(json.dumps(a2a))
        async with Client(_http(base, "pub-only")) as mcp:
            for tool, args in (
                ("ask_pub", {"task": "hi", "session_id": other}),
                ("wolf_approve", {"session_id": other, "call_id": "c", "approved": True}),
            ):
                with pytest.raises(MCPError) as refused:
                    await mcp.call_tool(tool, args)
                assert "not found" in str(refused.value)
            with pytest.raises(MCPError):
                await mcp.read_resource(f"wolf://sessions/{other}/transcript")
            listed = [str(r.uri) for r in (await mcp.list_resources()).resources]
            assert f"wolf://sessions/{mine}/transcript" in listed
            assert not any(other in uri for uri in listed)
            await mcp.read_resource(f"wolf://sessions/{mine}/transcript")
        status = await wolf.status(other)
        assert status.counters.turn_seq == 0 and status.queued == 0
        for sid in (other, mine):
            await wolf.close(sid)


async def test_served_is_a_reserved_config_name(wolf):
    """A registry config named `served` would be what `configs: [served]` keys reach."""
    with pytest.raises(ValueError, match="served"):
        await wolf.config_push("served", SERVED)


async def test_mcp_lists_the_keys_own_sessions_however_many_others_the_tenant_has(
    client, task_queue, run_worker
):
    """Minor note of the review: resources/list took the tenant's newest 100 sessions, then kept
    those the key may use: a key limited to `pub` saw none of its own behind 101 `admin` sessions.
    (The `admin` sessions wait on a queue no worker polls: visibility lists them all the same.)"""
    wolf = WolfClient(client, tenant="tenant-a", task_queue=task_queue)
    idle = WolfClient(client, tenant="tenant-a", task_queue=f"nobody-{uuid.uuid4().hex[:6]}")
    async with (
        run_worker(local_models={"m": FunctionModel(_echo_instructions)}),
        serving(client, task_queue, SERVED, keys=KEYS) as base,
    ):
        mine = await wolf.start_session("pub", SERVED)
        others = [await idle.start_session("admin", SERVED) for _ in range(101)]
        try:
            await wait_for(lambda: _listed(idle, others), timeout=60)
            async with Client(_http(base, "pub-only")) as mcp:
                listed = [str(r.uri) for r in (await mcp.list_resources()).resources]
            assert f"wolf://sessions/{mine}/transcript" in listed
            assert not any(sid in uri for sid in others for uri in listed)
        finally:
            for sid in others:
                await client.get_workflow_handle(f"wolf/tenant-a/{sid}").terminate("test done")
            await wolf.close(mine)


async def _listed(wolf: WolfClient, ids: list[str]) -> bool:
    """Whether visibility lists every one of `ids` (the newest sessions of `admin`)."""
    return set(ids) <= {s.session_id for s in await wolf.list_sessions(agent="admin", limit=len(ids))}
