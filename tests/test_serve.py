"""`wolf serve` basics: who may call, what a bad request gets, binding rules."""

from __future__ import annotations

import asyncio
import uuid

import httpx2 as httpx
import pytest
from temporalio.client import Client

from agentwolf.config.policy import ApiKeyEntry
from agentwolf.protocols.auth import ApiKeys, digest
from agentwolf.protocols.served import ApiError, Served
from agentwolf.protocols.server import BindingRefused, check_binding
from tests.conftest import make_manifest
from tests.support.serving import serving


async def test_keys_are_required_and_errors_have_openai_s_shape(client, task_queue):
    async with serving(client, task_queue, make_manifest()) as base, httpx.AsyncClient(base_url=base) as http:
        assert (await http.get("/healthz")).status_code == 200
        for headers in ({}, {"Authorization": "Bearer wrong"}, {"Authorization": "Basic key-a"}):
            answer = await http.get("/v1/models", headers=headers)
            assert answer.status_code == 401
            assert answer.json()["error"]["type"] == "authentication_error"
        big = await http.post(
            "/v1/chat/completions",
            content=b"x" * (2 << 20),
            headers={"Authorization": "Bearer key-a", "Content-Type": "application/json"},
        )
        assert big.status_code == 413 and big.json()["error"]["code"] == "body_too_large"


async def test_without_keys_only_this_machines_clients_are_answered(client, task_queue):
    """`--no-auth` listens on loopback, but a web page can reach loopback too: a foreign Host (DNS
    rebinding) or a browser's foreign Origin (a cross-site POST) is refused before any route runs."""
    async with (
        serving(client, task_queue, make_manifest(), open_tenant=f"open-{uuid.uuid4().hex[:6]}") as base,
        httpx.AsyncClient(base_url=base) as http,
    ):
        assert (await http.get("/v1/models")).status_code == 200
        assert (await http.get("/v1/models", headers={"Origin": "http://localhost:3000"})).status_code == 200
        for headers in ({"Host": "evil.example"}, {"Origin": "http://evil.example"}, {"Origin": "null"}):
            refused = await http.post(
                "/a2a/a", content=b'{"jsonrpc": "2.0"}', headers={**headers, "Content-Type": "text/plain"}
            )
            assert refused.status_code == 403, headers
            assert refused.json()["error"]["type"] == "permission_error"


def test_binding_rules():
    none = ApiKeys([])
    some = ApiKeys.load([], {"WOLF_API_KEYS": "k=t"})
    check_binding("127.0.0.1", none, no_auth=True)
    check_binding("0.0.0.0", some, no_auth=False)
    for host, keys, no_auth in (
        ("0.0.0.0", none, True),
        ("127.0.0.1", none, False),
        ("0.0.0.0", none, False),
    ):
        with pytest.raises(BindingRefused):
            check_binding(host, keys, no_auth)
    assert some.principal("k").tenant == "t" and some.principal("K") is None
    assert digest("k") != "k" and len(digest("k")) == 64
    with pytest.raises(ValueError, match="key=tenant"):
        ApiKeys.load([], {"WOLF_API_KEYS": "just-a-key"})


async def test_slowloris_clients_get_408_and_never_hold_up_others(client, task_queue):
    """Slow clients: a body trickling in gets 408 after the body timeout; connections that never
    finish their headers cost a coroutine each; other clients are served meanwhile."""
    async with serving(client, task_queue, make_manifest(), body_timeout=1.0) as base:
        host, port = base.removeprefix("http://").split(":")
        stalled = []
        for _ in range(50):  # headers that never end
            _, writer = await asyncio.open_connection(host, int(port))
            writer.write(b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\n")
            await writer.drain()
            stalled.append(writer)
        reader, writer = await asyncio.open_connection(host, int(port))
        writer.write(
            b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer key-a\r\n"
            b"Content-Type: application/json\r\nContent-Length: 100\r\n\r\n{"
        )
        await writer.drain()
        async with httpx.AsyncClient(base_url=base, headers={"Authorization": "Bearer key-a"}) as http:
            models = await asyncio.wait_for(http.get("/v1/models"), 10)
        assert models.status_code == 200 and models.json()["data"]
        answer = await asyncio.wait_for(reader.read(4096), 10)
        assert answer.startswith(b"HTTP/1.1 408") and b"body_timeout" in answer
        for w in [*stalled, writer]:
            w.close()


async def test_a_key_limited_to_some_agents_sees_and_runs_only_those(client, task_queue):
    manifest = make_manifest()
    manifest = manifest.model_copy(update={"agents": {**manifest.agents, "b": manifest.agents["a"]}})
    entries = [ApiKeyEntry(sha256=digest("only-a"), tenant="tenant-a", agents=frozenset({"a"}))]
    served = Served(client=client, task_queue=task_queue, keys=ApiKeys(entries), manifest=manifest)
    principal = served.keys.principal("only-a")
    assert principal is not None
    assert [t.model for t in await served.models(principal)] == ["a"]
    with pytest.raises(ApiError) as refused:
        await served.resolve(principal, "b")
    assert refused.value.status == 404 and refused.value.code == "model_not_found"


async def test_temporal_errors_are_503_with_retry_after(client, task_queue):
    """A namespace the server does not have stands in for a cluster that does not answer."""
    elsewhere = await Client.connect(client.service_client.config.target_host, namespace="no-such-namespace")
    async with serving(elsewhere, task_queue) as base, httpx.AsyncClient(base_url=base) as http:
        answer = await http.get("/v1/models", headers={"Authorization": "Bearer key-a"})
    assert answer.status_code == 503 and answer.headers["retry-after"] == "1"
    assert answer.json()["error"]["code"] == "temporal_unavailable"
    assert "no-such-namespace" not in answer.text  # Temporal's words stay in the server's log
