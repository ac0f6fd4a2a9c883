"""The console's sign-in and access rule without a browser: the cookie is a sign-in token the server
issued (never the key), named `__Host-` so no sibling site can set it, and signing out revokes it;
a key limited to some agents sees and operates only their schedules and configs, as everywhere else."""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
import uuid
from pathlib import Path
from typing import Any

import httpx

from agentwolf.client.wolf_client import WolfClient
from agentwolf.config.manifest import Manifest
from agentwolf.config.policy import ApiKeyEntry
from agentwolf.protocols.app import create_app
from agentwolf.protocols.auth import ApiKeys, digest
from agentwolf.protocols.served import Served
from tests.conftest import tools_server
from tests.support.models import Script, text
from tests.support.serving import console_cookie, free_port, serve_process, serving

KEY = "console-key-0123456789"
JSON = {"Accept": "application/json"}
HTML = {"Accept": "text/html"}


def console(keys: ApiKeys) -> httpx.AsyncClient:
    """The app in process over HTTPS (no Temporal: the pages asked here need none)."""
    served = Served(client=None, task_queue="q", keys=keys)  # type: ignore[arg-type]
    app = create_app(served, routes=None)
    return httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="https://testserver")


async def test_the_cookie_is_a_host_only_sign_in_token_not_the_key():
    async with console(ApiKeys.load([], {"WOLF_API_KEYS": f"{KEY}=acme"})) as http:
        answer = await http.post(
            "/console/login", data={"key": KEY}, headers={"Origin": "https://testserver"}
        )
        http.cookies.clear()  # only what each request passes is sent
        set_cookie = answer.headers["set-cookie"]
        name, _, token = set_cookie.split(";")[0].partition("=")
        attributes = {a.strip().lower() for a in set_cookie.split(";")[1:]}
        signed_in = await http.get("/console/nowhere", headers=JSON, cookies={name: token})
        raw_key = await http.get("/console/nowhere", headers=JSON, cookies={name: KEY})
        forged = await http.get("/console/nowhere", headers=JSON, cookies={name: token[:-2] + "xx"})
    assert name == "__Host-wolf_console"
    assert {"path=/", "secure", "httponly", "samesite=strict"} <= attributes
    assert not any(a.startswith("domain=") for a in attributes)
    assert KEY not in token and digest(KEY) not in token
    assert signed_in.status_code == 404  # admitted: the console's own "no such page"
    assert raw_key.status_code == forged.status_code == 401


async def test_signing_out_revokes_the_token():
    async with console(ApiKeys.load([], {"WOLF_API_KEYS": f"{KEY}=acme"})) as http:
        cookie = await console_cookie(http, KEY)
        before = await http.get("/console/nowhere", headers=JSON, cookies=cookie)
        out = await http.post("/console/logout", headers={"Origin": "https://testserver"}, cookies=cookie)
        after = await http.get("/console/nowhere", headers=JSON, cookies=cookie)
        again = await console_cookie(http, KEY)  # a new sign-in gets a new token
        fresh = await http.get("/console/nowhere", headers=JSON, cookies=again)
    assert before.status_code == 404 and out.status_code == 303
    assert after.status_code == 401, after.text
    assert again != cookie and fresh.status_code == 404


def two_agents(**jobs: object) -> Manifest:
    spec = {"model": "local:m", "capabilities": [{"mcp": "tools"}]}
    return Manifest.model_validate(
        {
            "host": {"mcp_servers": {"tools": tools_server()}},
            "agents": {"pub": spec, "admin": {**spec, "instructions": "ADMIN runbook: vault://ops/root"}},
            "jobs": jobs,
        }
    )


async def test_a_key_limited_to_one_agent_neither_sees_nor_fires_other_agents_schedules_or_configs(
    client, task_queue, run_worker
):
    """The review's case: `agents: [pub]` listed every schedule of the tenant, resumed and fired the
    admin agent's, and read the admin agent's instructions in the config diff."""
    tenant = f"scoped-{uuid.uuid4().hex[:8]}"
    keys = ApiKeys(
        [
            ApiKeyEntry(sha256=digest("key-all"), tenant=tenant),
            ApiKeyEntry(sha256=digest("key-pub"), tenant=tenant, agents=frozenset({"pub"})),
        ]
    )
    wolf = WolfClient(client, tenant=tenant, task_queue=task_queue)
    script = Script(lambda script: text("ok"))
    manifest = two_agents(
        audit={"agent": "admin", "prompt": "audit everything"}, digest={"agent": "pub", "prompt": "sum up"}
    )
    schedules = ("admin-job", "admin-session", "pub-job", "pub-session")
    async with run_worker(local_models={"m": script.model}):
        await wolf.config_push("ops", Manifest.model_validate({"agents": {"pub": {"model": "local:m"}}}))
        await wolf.config_push("ops", manifest)  # v2 adds the admin agent: the diff shows it
        await wolf.config_push("pubs", Manifest.model_validate({"agents": {"pub": {"model": "local:m"}}}))
        admin = await wolf.start_session("admin", config_name="ops")
        pub = await wolf.start_session("pub", config_name="ops")
        every: dict[str, Any] = {"cron": "0 3 * * *", "paused": True}
        await wolf.schedule_create("admin-job", job="audit", config_name="ops", **every)
        await wolf.schedule_create("admin-session", session=admin, prompt="report", **every)
        await wolf.schedule_create("pub-job", job="digest", config_name="ops", **every)
        await wolf.schedule_create("pub-session", session=pub, prompt="report", **every)
        try:
            async with (
                serving(client, task_queue, keys=keys) as base,
                httpx.AsyncClient(base_url=base, timeout=60) as http,
            ):
                scoped, whole = await console_cookie(http, "key-pub"), await console_cookie(http, "key-all")
                origin = {"Origin": base, "Content-Type": "application/x-www-form-urlencoded", **JSON}
                listed = (await http.get("/console/schedules", headers=HTML, cookies=scoped)).text
                everything = (await http.get("/console/schedules", headers=HTML, cookies=whole)).text
                acts = {
                    (name, action): (
                        await http.post(
                            f"/console/schedules/{name}/{action}",
                            content="go=1",
                            headers=origin,
                            cookies=scoped,
                        )
                    ).status_code
                    for name in ("admin-job", "admin-session")
                    for action in ("resume", "trigger", "pause")
                }
                allowed = await http.post(
                    "/console/schedules/pub-job/resume", content="go=1", headers=origin, cookies=scoped
                )
                configs = (await http.get("/console/configs", headers=HTML, cookies=scoped)).text
                ops = await http.get("/console/configs/ops", headers=HTML, cookies=scoped)
                pubs = await http.get("/console/configs/pubs", headers=HTML, cookies=scoped)
                ops_whole = await http.get("/console/configs/ops", headers=HTML, cookies=whole)
            for name in ("admin-job", "admin-session"):
                described = await wolf.schedule_describe(name)
                assert described.paused and described.actions == 0, described
            assert not (await wolf.schedule_describe("pub-job")).paused
        finally:
            for name in schedules:
                await wolf.schedule_delete(name)
            for sid in (admin, pub):
                await wolf.close(sid)
    assert all(f'data-schedule="{name}"' in everything for name in schedules)
    assert [n for n in schedules if f'data-schedule="{n}"' in listed] == ["pub-job", "pub-session"]
    assert set(acts.values()) == {404}, acts
    assert allowed.status_code == 200
    assert 'href="/console/configs/pubs"' in configs and 'href="/console/configs/ops"' not in configs
    assert ops.status_code == 404 and "ADMIN" not in ops.text
    assert pubs.status_code == 200
    assert ops_whole.status_code == 200 and "ADMIN runbook" in ops_whole.text


PROXIED = {
    "Host": "console.example",
    "Origin": "https://console.example",
    "X-Forwarded-Proto": "https",
    "Content-Type": "application/x-www-form-urlencoded",
}
"""A sign-in as a TLS proxy on this machine passes it on."""


async def test_a_sign_in_through_a_tls_proxy_is_https_only_from_the_proxies_listed(client, task_queue):
    """uvicorn believes X-Forwarded-Proto from 127.0.0.1 by default; `wolf serve --forwarded-allow-ips`
    names other proxies, and then the same request is plain HTTP (the key is refused); a console
    secret too short to sign with stops `wolf serve` before it starts."""
    keys = ApiKeys.load([], {"WOLF_API_KEYS": f"{KEY}=acme"})
    async with serving(client, task_queue, keys=keys) as base, httpx.AsyncClient(base_url=base) as http:
        believed = await http.post("/console/login", content=f"key={KEY}", headers=PROXIED)
    assert believed.status_code == 303, believed.text

    wolf = str(Path(sys.executable).parent / "wolf")
    environ = {k: v for k, v in os.environ.items() if k not in ("WOLF_POLICY", "FORWARDED_ALLOW_IPS")}
    environ |= {
        "TEMPORAL_ADDRESS": client.service_client.config.target_host,
        "WOLF_API_KEYS": f"{KEY}=acme",
        "NO_COLOR": "1",
    }
    short = await asyncio.to_thread(
        subprocess.run,
        [wolf, "serve", "--task-queue", task_queue],
        capture_output=True,
        text=True,
        env={**environ, "WOLF_CONSOLE_SECRET": "too-short"},
        timeout=60,
    )
    assert short.returncode == 2 and "WOLF_CONSOLE_SECRET needs at least 32" in short.stderr, short.stderr
    port = free_port()
    command = [wolf, "serve", "--port", str(port), "--task-queue", task_queue]
    async with serve_process([*command, "--forwarded-allow-ips", "10.9.9.9"], port, environ) as http:
        doubted = await http.post("/console/login", content=f"key={KEY}", headers=PROXIED)
    assert doubted.status_code == 400 and "sign in over HTTPS" in doubted.text
    assert "set-cookie" not in doubted.headers
