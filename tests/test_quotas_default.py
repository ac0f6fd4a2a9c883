"""Provider limits nobody configured (agentwolf/hosts/quotas.py, `limiter-probe`): with no `limits`
entry, a fleet of sessions starting at once keeps inside a provider's budget it learns from the
rate-limit headers of the first answer, and never sends into a cooldown."""

from __future__ import annotations

import asyncio
import gc
from collections.abc import Iterator
from datetime import timedelta
from typing import Any

import pytest

from agentwolf.config.manifest import Manifest
from agentwolf.hosts.quotas import endpoint_id, learned
from agentwolf.workflows.quotas import Learned, quota_workflow_id
from tests.conftest import openai_manifest, record_history, tools_server, wait_for
from tests.support.openai_server import Reply, ScriptedOpenAI, tool_outputs
from tests.support.rate_limit import RateLimit


@pytest.fixture(autouse=True)
def _collected() -> Iterator[None]:
    """Finalizers of the test's clients and tasks run here (see tests/test_quotas.py)."""
    yield
    gc.collect()


def _echo_then_answer(request: dict[str, Any]) -> Reply:
    """Two model requests a turn: a tool call, then the answer."""
    if tool_outputs(request):
        return Reply(text="done")
    return Reply(tool_calls=[("echo", {"text": "hi"})])


async def test_twenty_sessions_at_once_keep_to_limits_nobody_configured(wolf, client, run_worker, task_queue):
    """Twenty sessions start at once on an endpoint that allows 20 requests per 4 s window (its
    answers say so: `x-ratelimit-limit-requests`, `RateLimit-Policy: 20;w=4`); each turn makes two
    requests; the manifest has no `limits` entry. At most one 429, nothing sent into a cooldown,
    every turn completed (before: no quotas without an entry, 20 requests the provider
    refused and sent again into their cooldowns)."""
    limit = RateLimit(rpm=20, window=4.0)
    with ScriptedOpenAI(_echo_then_answer, limit=limit) as server:
        manifest = openai_manifest(server.base_url, mcp_servers={"tools": tools_server()})
        assert manifest.host.models.quotas == []
        async with run_worker():
            sids = await asyncio.gather(*(wolf.submit(f"hi {i}", "a", manifest) for i in range(20)))
            results = await asyncio.gather(*(wolf.result(s) for s in sids))
            assert [r.outcome for r in results] == ["completed"] * 20
            assert len(limit.refusals()) <= 1, [(e.at, e.refused) for e in limit.log]
            assert limit.sent_in_cooldowns() == []
            assert len(limit.accepted()) == 40
            endpoint = endpoint_id(server.base_url.rstrip("/") + "/", "k", "gpt-4o-mini", task_queue)
            handle = client.get_workflow_handle(quota_workflow_id(endpoint))
            await record_history(client, handle.id, "limiter_learnt")
            await handle.terminate()


async def test_the_first_stream_opening_lets_the_others_go(wolf, client, run_worker):
    """Limits unknown; the first request streams its answer for 8 s. Its headers reach the quota workflow as
    the stream opens, so the other sessions' requests go while it still streams (before: they waited
    for its whole answer)."""
    limit = RateLimit(rpm=20, window=4.0)
    calls = 0

    def reply(request: dict[str, Any]) -> Reply:
        nonlocal calls
        calls += 1
        return Reply(chunks=["word "] * 16, interval=0.5) if calls == 1 else Reply(text="ok")

    with ScriptedOpenAI(reply, limit=limit) as server:
        manifest = Manifest.model_validate(
            {
                "host": {"models": {"providers": {"openai": {"api_key": "k", "base_url": server.base_url}}}},
                "agents": {"a": {"model": "openai:gpt-4o-mini"}},
            }
        )
        async with run_worker():
            first = await wolf.submit("long", "a", manifest)
            await wait_for(lambda: calls == 1, timeout=90)
            others = [await wolf.submit(f"short {i}", "a", manifest) for i in range(2)]
            results = [await wolf.result(s) for s in [first, *others]]
    streamed_until = max(at for at, delta in server.sent if delta == "word ")  # the first answer's
    assert [r.outcome for r in results] == ["completed"] * 3
    assert [e.at < streamed_until for e in limit.log] == [True] * 3, (streamed_until, limit.log)


@pytest.mark.parametrize(
    ("headers", "said"),
    [
        (
            {"x-ratelimit-limit-requests": "500", "x-ratelimit-limit-tokens": "30000"},
            Learned(rpm=500, input_tpm=30000),
        ),
        ({"anthropic-ratelimit-output-tokens-limit": "8000"}, Learned(output_tpm=8000)),
        ({"x-ratelimit-limit-requests": "-1", "x-ratelimit-limit-tokens": "0"}, None),  # Azure's nonsense
        ({"ratelimit-policy": "20;w=4"}, Learned(window=timedelta(seconds=4))),  # the IETF draft, old form
        (
            {"ratelimit-policy": '"default";q=20;w=60, "day";q=900;w=86400'},
            Learned(window=timedelta(minutes=1)),
        ),
        ({"ratelimit-policy": "20"}, None),
    ],
)
def test_limits_are_read_from_rate_limit_headers(headers: dict[str, str], said: Learned | None) -> None:
    assert learned(headers) == said
