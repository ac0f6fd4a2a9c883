"""Webhooks on `wolf serve` (real HTTP, real dev server): signatures, idempotent redelivery, targets."""

from __future__ import annotations

import hashlib
import hmac
import json
import time
import uuid
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import httpx
import pytest

from agentwolf.client.wolf_client import WolfClient
from agentwolf.config.manifest import Manifest
from agentwolf.config.policy import WorkerPolicy
from agentwolf.protocols import hooks
from agentwolf.protocols.capacity import Capacity
from agentwolf.workflows.types import SCHEDULE_ATTR
from tests.conftest import make_manifest, wait_for
from tests.support.models import Script, text, tool, user_texts
from tests.support.serving import serving

SECRET = "hook-secret-value-1234"
POLICY = WorkerPolicy(secrets={"*": ["HOOK_SECRET"]})
BODY = {
    "issue": {"html_url": "https://example.org/issues/7", "title": "Crash"},
    "repository": {"name": "wolf"},
}


def hook_manifest(session: str = "s1") -> Manifest:
    base = make_manifest().model_dump()
    base["jobs"] = {
        "triage": {
            "agent": "a",
            "prompt": "Triage {issue_url} in {repo}.",
            "vars": {"issue_url": {}, "repo": {}},
            "output": {
                "type": "object",
                "properties": {"severity": {"enum": ["low", "high"]}},
                "required": ["severity"],
            },
        }
    }
    base["hooks"] = {
        "new-issue": {
            "job": "triage",
            "vars": {"issue_url": "{body.issue.html_url}", "repo": "{body.repository.name}"},
            "secret": "HOOK_SECRET",
        },
        "poke": {"session": session, "prompt": "New issue: {body.issue.title}", "secret": "HOOK_SECRET"},
        "unlisted": {"session": session, "prompt": "x", "secret": "NOT_IN_POLICY"},
    }
    return Manifest.model_validate(base)


@asynccontextmanager
async def posting(
    client, task_queue: str, manifest: Manifest | None, config_name: str | None = None
) -> AsyncIterator[httpx.AsyncClient]:
    """`wolf serve` with the hook route (under POLICY) on 127.0.0.1, and an HTTP client for it."""
    async with (
        serving(client, task_queue, manifest, config_name=config_name, routes=hooks.routes(POLICY)) as base,
        httpx.AsyncClient(base_url=base) as http,
    ):
        yield http


def sign(body: bytes, secret: str = SECRET) -> str:
    return "sha256=" + hmac.new(secret.encode(), body, hashlib.sha256).hexdigest()


def sign_at(at: int, body: bytes) -> dict[str, str]:
    """Headers of a request signed with a timestamp: the HMAC covers `<at>.<body>`."""
    return {"X-Wolf-Timestamp": str(at), "X-Wolf-Signature-256": sign(f"{at}.".encode() + body)}


async def hook_runs(client, task_queue: str, trigger: str) -> int:
    """Workflows the hook started on this test's queue (the dev server is shared by the tests)."""
    query = f"{SCHEDULE_ATTR.name} = '{trigger}' AND TaskQueue = '{task_queue}'"
    return (await client.count_workflows(query)).count


@pytest.fixture(autouse=True)
def _secret(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HOOK_SECRET", SECRET)


async def test_a_signed_webhook_starts_one_run_and_a_redelivery_none(wolf, client, task_queue, run_worker):
    script = Script(lambda s: tool("final_result", {"severity": "high"}))
    body = json.dumps(BODY).encode()
    async with (
        run_worker(local_models={"m": script.model}),
        posting(client, task_queue, hook_manifest()) as http,
    ):
        headers = {"X-Wolf-Signature-256": sign(body), "Idempotency-Key": "delivery-1"}
        first = await http.post("/hooks/new-issue", content=body, headers=headers)
        assert first.status_code == 202, first.text
        run = first.json()
        assert run["duplicate"] is False and run["session_id"].startswith("_hook-new-issue-")
        result = await wolf.job_result(run["session_id"])
        assert result.output == {"severity": "high"}
        assert "Triage https://example.org/issues/7 in wolf." in user_texts(script.requests[0])
        # Redelivered after the run ended (GitHub's headers this time): nothing starts, same ids.
        github = {"X-Hub-Signature-256": sign(body), "X-GitHub-Delivery": "delivery-1"}
        again = await http.post("/hooks/new-issue", content=body, headers=github)
        assert again.status_code == 202 and again.json() == {**run, "duplicate": True}
        assert await hook_runs(client, task_queue, "hook-new-issue") == 1
        assert len(script.requests) == 1


@pytest.mark.parametrize(
    "headers",
    [
        {},
        {"X-Wolf-Signature-256": sign(b"other body")},
        {"X-Wolf-Signature-256": sign(json.dumps(BODY).encode(), "wrong-secret-000000")},
        {"X-Wolf-Signature-256": sign(json.dumps(BODY).encode()).replace("sha256=", "sha1=")},
        {"X-Wolf-Signature-256": "sha256="},
    ],
)
async def test_a_bad_signature_is_401_and_starts_nothing(client, task_queue, headers):
    async with posting(client, task_queue, hook_manifest()) as http:
        refused = await http.post("/hooks/new-issue", content=json.dumps(BODY).encode(), headers=headers)
    assert refused.status_code == 401 and "signature" in refused.json()["error"]["message"]
    assert await hook_runs(client, task_queue, "hook-new-issue") == 0


async def test_a_session_hook_prompts_the_session(wolf, client, task_queue, run_worker):
    script = Script(lambda s: text(f"answer {s.calls}"))
    async with run_worker(local_models={"m": script.model}):
        sid = await wolf.start_session("a", make_manifest())
        body = json.dumps(BODY).encode()
        async with posting(client, task_queue, hook_manifest(sid)) as http:
            sent = await http.post("/hooks/poke", content=body, headers={"X-Wolf-Signature-256": sign(body)})
        assert sent.status_code == 202 and sent.json()["session_id"] == sid
        await wait_for(lambda: script.calls >= 1, timeout=30)
        assert user_texts(script.requests[0])[-1] == "New issue: Crash"
        await wolf.close(sid)


async def test_without_a_key_a_replayed_body_starts_nothing(wolf, client, task_queue, run_worker):
    """Someone who captured a signed delivery sends it again: its body's digest is its key."""
    script = Script(lambda s: text(f"answer {s.calls}"))
    async with run_worker(local_models={"m": script.model}):
        sid = await wolf.start_session("a", make_manifest())
        body = json.dumps({**BODY, "nonce": sid}).encode()
        async with posting(client, task_queue, hook_manifest(sid)) as http:
            signed_headers = {"X-Wolf-Signature-256": sign(body)}
            first = await http.post("/hooks/poke", content=body, headers=signed_headers)
            again = await http.post("/hooks/poke", content=body, headers=signed_headers)
        assert first.status_code == again.status_code == 202
        assert again.json() == {**first.json(), "duplicate": True}
        await wait_for(lambda: script.calls >= 1, timeout=30)
        assert (await wolf.status(sid)).counters.turns + (await wolf.status(sid)).queued <= 1
        await wolf.close(sid)


@pytest.mark.parametrize("secret", ["", "short-secret"])
async def test_an_empty_or_short_secret_is_no_secret(client, task_queue, monkeypatch, secret):
    monkeypatch.setenv("HOOK_SECRET", secret)
    body = json.dumps(BODY).encode()
    async with posting(client, task_queue, hook_manifest()) as http:
        refused = await http.post(
            "/hooks/new-issue", content=body, headers={"X-Wolf-Signature-256": sign(body, secret)}
        )
    assert refused.status_code == 503 and "no usable secret" in refused.json()["error"]["message"]
    assert await hook_runs(client, task_queue, "hook-new-issue") == 0


async def test_hook_refusals_are_clear(client, task_queue):
    body = json.dumps({"issue": {}}).encode()
    async with posting(client, task_queue, hook_manifest()) as http:
        unknown = await http.post("/hooks/nope", content=body, headers={"X-Wolf-Signature-256": sign(body)})
        secretless = await http.post("/hooks/unlisted", content=body)
        missing = await http.post(
            "/hooks/new-issue", content=body, headers={"X-Wolf-Signature-256": sign(body)}
        )
        gone = await http.post("/hooks/poke", content=body, headers={"X-Wolf-Signature-256": sign(body)})
    assert unknown.status_code == 401  # like a bad signature: no hook names to probe
    assert secretless.status_code == 503 and "no usable secret" in secretless.json()["error"]["message"]
    assert missing.status_code == 400 and "has no 'body.issue.html_url'" in missing.json()["error"]["message"]
    assert gone.status_code == 404  # the session s1 does not exist
    assert await hook_runs(client, task_queue, "hook-new-issue") == 0


async def test_a_captured_body_with_fresh_idempotency_keys_starts_one_run(client, task_queue, run_worker):
    """The keys are unsigned: an attacker who captured one signed request changes them at will."""
    script = Script(lambda s: tool("final_result", {"severity": "low"}))
    body = json.dumps({**BODY, "nonce": uuid.uuid4().hex}).encode()
    async with (
        run_worker(local_models={"m": script.model}),
        posting(client, task_queue, hook_manifest()) as http,
    ):
        signed = {"X-Wolf-Signature-256": sign(body)}
        keys = [
            {},
            {"Idempotency-Key": "replay-1"},
            {"Idempotency-Key": "replay-2"},
            {"X-GitHub-Delivery": "r3"},
        ]
        answers = [await http.post("/hooks/new-issue", content=body, headers={**signed, **k}) for k in keys]
    assert [a.status_code for a in answers] == [202] * 4
    assert [a.json()["duplicate"] for a in answers] == [False, True, True, True]
    assert len({a.json()["session_id"] for a in answers}) == 1
    assert await wait_for(lambda: hook_runs(client, task_queue, "hook-new-issue")) == 1


async def _at_least(count: Any, n: int) -> int | None:
    return value if (value := await count) >= n else None


async def test_a_signed_timestamp_lets_a_body_repeat_and_expires_a_capture(client, task_queue, run_worker):
    script = Script(lambda s: tool("final_result", {"severity": "low"}))
    body = json.dumps({**BODY, "nonce": uuid.uuid4().hex}).encode()
    now = int(time.time())
    async with (
        run_worker(local_models={"m": script.model}),
        posting(client, task_queue, hook_manifest()) as http,
    ):

        async def post(headers: dict[str, str]) -> httpx.Response:
            return await http.post("/hooks/new-issue", content=body, headers=headers)

        first, again = await post(sign_at(now, body)), await post(sign_at(now, body))
        later = await post(sign_at(now + 1, body))
        stale = await post(sign_at(now - hooks.TOLERANCE - 60, body))
        grafted = await post({"X-Wolf-Timestamp": str(now + 2), "X-Wolf-Signature-256": sign(body)})
        garbled = await post({**sign_at(now, body), "X-Wolf-Timestamp": "soon"})
    assert (first.status_code, again.status_code, later.status_code) == (202, 202, 202)
    assert again.json() == {**first.json(), "duplicate": True}  # a redelivery of one signed request
    assert not later.json()["duplicate"]  # the sender's deliberate repeat: a new timestamp
    assert stale.status_code == grafted.status_code == garbled.status_code == 401
    assert await wait_for(lambda: _at_least(hook_runs(client, task_queue, "hook-new-issue"), 2)) == 2


async def test_unsigned_requests_cost_no_registry_queries_and_name_no_hooks(
    wolf, client, task_queue, run_worker, monkeypatch
):
    """Served from the registry: the hook table is read once, not per request, and an unknown hook
    answers exactly like a known one without a good signature."""
    config = f"cfg-{uuid.uuid4().hex[:8]}"
    reads: list[str] = []
    real = WolfClient.config_get

    async def counted(self: WolfClient, name: str, version: int | None = None) -> object:
        reads.append(name)
        return await real(self, name, version)

    async with run_worker(local_models={"m": Script(lambda s: text("ok")).model}):
        await wolf.config_push(config, hook_manifest())
        monkeypatch.setattr(WolfClient, "config_get", counted)
        async with posting(client, task_queue, None, config_name=config) as http:
            answers = [
                await http.post(f"/hooks/{name}", content=b"{}", headers=headers)
                for name in ("new-issue", "does-not-exist", "poke", "nope") * 5
                for headers in ({}, {"X-Wolf-Signature-256": sign(b"{}", "wrong-secret-000000")})
            ]
    assert {(a.status_code, a.text) for a in answers} == {(401, answers[0].text)}
    assert len(reads) <= 1


async def test_a_delivery_counts_in_its_hook_s_share_once_its_signature_checks(
    client, task_queue, monkeypatch
):
    """Until its signature checks a delivery is anonymous (a wrong one is answered 401 as always);
    then it counts in its hook's share, here full, so it is refused 429 naming the hook."""
    monkeypatch.setenv("HOOK_SECRET", SECRET)
    limits = Capacity(max_requests_per_key=0)
    async with (
        serving(client, task_queue, hook_manifest(), routes=hooks.routes(POLICY), limits=limits) as base,
        httpx.AsyncClient(base_url=base) as http,
    ):
        body = json.dumps(BODY).encode()
        json_type = {"Content-Type": "application/json"}
        unsigned = await http.post("/hooks/new-issue", content=body, headers=json_type)
        signed = await http.post(
            "/hooks/new-issue", content=body, headers={**json_type, "X-Wolf-Signature-256": sign(body)}
        )
    assert unsigned.status_code == 401
    assert signed.status_code == 429 and signed.headers["retry-after"] == "2"
    assert signed.json()["error"]["message"].startswith("hook 'new-issue' has 0 requests")
