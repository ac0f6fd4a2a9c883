"""`wolf serve`'s HTTP basics: liveness and readiness probes, JSON errors for every route, and an
access log that names the key by its id, never the key."""

from __future__ import annotations

import json
import logging

import httpx2 as httpx
import pytest

from agentwolf.protocols.auth import digest
from agentwolf.telemetry.logs import JsonFormatter
from tests.conftest import make_manifest, wait_for
from tests.support.serving import serving


async def test_health_is_liveness_and_ready_needs_a_polling_worker(client, task_queue, run_worker):
    async with serving(client, task_queue, make_manifest()) as base, httpx.AsyncClient(base_url=base) as http:
        health = await http.get("/health")  # no key: a load balancer's probe
        assert health.status_code == 200 and health.json() == {"status": "ok"}
        assert (await http.get("/healthz")).json() == {"ok": True}
        ready = await http.get("/ready")
        assert ready.status_code == 503 and ready.headers["retry-after"]
        assert ready.json() == {
            "status": "unavailable",
            "checks": {"temporal": "ok", "worker": "no worker polls the served task queue"},
        }
        assert task_queue not in ready.text and client.namespace not in ready.text
        async with run_worker():

            async def ready_now() -> httpx.Response | None:
                answer = await http.get("/ready")
                return answer if answer.status_code == 200 else None

            answer = await wait_for(ready_now)
        assert answer.json() == {"status": "ok", "checks": {"temporal": "ok", "worker": "ok"}}


async def test_unknown_routes_and_wrong_methods_answer_openai_s_json_shape(client, task_queue):
    async with (
        serving(client, task_queue, make_manifest()) as base,
        httpx.AsyncClient(base_url=base, headers={"Authorization": "Bearer key-a"}) as http,
    ):
        for method, path, status, code in (
            ("GET", "/v1/embeddings", 404, "not_found"),
            ("GET", "/", 404, "not_found"),
            ("GET", "/v1/chat/completions", 405, "method_not_allowed"),
            ("DELETE", "/health", 405, "method_not_allowed"),
        ):
            answer = await http.request(method, path)
            assert answer.status_code == status, (method, path)
            assert answer.headers["content-type"] == "application/json"
            error = answer.json()["error"]
            assert set(error) == {"message", "type", "code", "param"} and error["code"] == code
        assert "POST" in (await http.get("/v1/chat/completions")).headers["allow"]


async def test_each_request_is_logged_with_the_key_s_id_never_the_key(client, task_queue, caplog):
    caplog.set_level(logging.INFO, logger="agentwolf.protocols.http")
    async with serving(client, task_queue, make_manifest()) as base, httpx.AsyncClient(base_url=base) as http:
        assert (await http.get("/v1/models", headers={"Authorization": "Bearer key-a"})).status_code == 200
        assert (await http.get("/v1/models", headers={"Authorization": "Bearer key-zzz"})).status_code == 401
    records = [r for r in caplog.records if r.name == "agentwolf.protocols.http"]
    fields = [r.http for r in records]  # type: ignore[attr-defined]
    served = next(f for f in fields if f["status"] == 200)
    assert served["method"] == "GET" and served["path"] == "/v1/models"
    assert served["key_id"] == digest("key-a")[:12] and served["duration_ms"] >= 0
    refused = next(f for f in fields if f["status"] == 401)
    assert refused["key_id"] == "-"
    lines = [JsonFormatter().format(r) for r in records]
    assert json.loads(lines[0])["http"]["path"] == "/v1/models"
    for text in [*lines, *(r.getMessage() for r in records), caplog.text]:
        assert "key-a" not in text and "key-zzz" not in text and digest("key-a") not in text


@pytest.mark.parametrize("path", ["/health", "/ready"])
async def test_probes_need_no_key_and_leak_nothing_without_one(client, task_queue, path):
    async with serving(client, task_queue, make_manifest()) as base, httpx.AsyncClient(base_url=base) as http:
        answer = await http.get(path)
    assert answer.status_code in (200, 503) and "tenant" not in answer.text


def test_a_poller_temporal_still_lists_is_a_worker_only_while_it_polls():
    """Temporal lists a SIGKILLed worker's poller for minutes: /ready judges by its last access."""
    from datetime import UTC, datetime, timedelta

    from temporalio.api.taskqueue.v1 import PollerInfo

    from agentwolf.protocols.app import POLL_FRESH, polling

    now = datetime.now(UTC)
    seen = PollerInfo()
    seen.last_access_time.FromDatetime(now - timedelta(seconds=30))
    assert polling(seen, now)
    seen.last_access_time.FromDatetime(now - POLL_FRESH - timedelta(seconds=1))
    assert not polling(seen, now)
