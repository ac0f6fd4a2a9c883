"""Provider flow control (agentwolf/hosts/flow.py, agentwolf/workflows/limiter.py) on a real dev
server, against the scripted provider enforcing its own limits (tests/support/rate_limit.py)."""

from __future__ import annotations

import asyncio
from typing import Any

from agentwolf.config.manifest import Manifest
from tests.support.openai_server import Reply, ScriptedOpenAI
from tests.support.rate_limit import RateLimit


def limited_manifest(base_url: str, **limits: Any) -> Manifest:
    """Agent `a` on the `openai:` provider at `base_url`, under `host.models.limits`."""
    return Manifest.model_validate(
        {
            "host": {
                "models": {
                    "providers": {"openai": {"api_key": "k", "base_url": base_url}},
                    "limits": [{"match": "openai:*", **limits}],
                }
            },
            "agents": {"a": {"model": "openai:gpt-4o-mini", "stream": False}},
        }
    )


async def test_sessions_share_the_budget_and_none_is_refused(wolf, run_worker):
    limit = RateLimit(rpm=3, window=4.0)
    with ScriptedOpenAI(lambda r: Reply(text="ok"), limit=limit) as server:
        manifest = limited_manifest(server.base_url, rpm=3, window=4.0)
        async with run_worker():
            sids = [await wolf.submit(f"hi {i}", "a", manifest) for i in range(7)]
            results = await asyncio.gather(*(wolf.result(s) for s in sids))
    assert [r.outcome for r in results] == ["completed"] * 7
    assert len(limit.accepted()) == 7
    assert limit.refusals() == []
