"""The web console (/console on `wolf serve`) in a real browser: Playwright driving Debian's Chromium
against the served app, a real worker and the dev server. Sign in with a key, start a session and
watch its answer stream in, steer a running turn, read the usage page's totals against `wolf usage
--json`; another tenant's session is not found, and other sites' pages cannot act. Every page is
photographed at 1280 and 390 px under .ci/artifacts/."""

from __future__ import annotations

import asyncio
import json
import re
import signal
import subprocess
import sys
import uuid
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from datetime import datetime
from pathlib import Path

import httpx
import pytest
from playwright.async_api import Browser, BrowserContext, Page, async_playwright, expect
from pydantic_ai.messages import ModelRequest, ToolReturnPart, UserPromptPart

from agentwolf.cli.errors import worker_polls
from agentwolf.client.wolf_client import WolfClient
from agentwolf.config.policy import ApiKeyEntry
from agentwolf.protocols.auth import ApiKeys, digest
from agentwolf.protocols.console import pages
from agentwolf.workflows.types import workflow_id
from tests.conftest import (
    make_manifest,
    openai_manifest,
    record_history,
    tools_server,
    wait_for,
    worker_process,
)
from tests.support.models import Script, text, tool
from tests.support.openai_server import Reply, ScriptedOpenAI, tool_outputs
from tests.support.serving import console_cookie, serving

CHROMIUM = "/usr/bin/chromium"
ARTIFACTS = Path(__file__).parent.parent / ".ci" / "artifacts"
WIDTHS = (1280, 390)
ANSWER = "The console shows this answer word by word as the model streams it."
WOLF = str(Path(sys.executable).parent / "wolf")

pytestmark = pytest.mark.needs(
    Path(CHROMIUM).exists(), f"Debian's Chromium at {CHROMIUM} (apt-get install chromium)"
)


def _texts(script: Script) -> tuple[list[str], int]:
    """The latest request's user texts and how many tool results it carries."""
    parts = [p for m in script.requests[-1] if isinstance(m, ModelRequest) for p in m.parts]
    users = [p.content for p in parts if isinstance(p, UserPromptPart) and isinstance(p.content, str)]
    return users, sum(isinstance(p, ToolReturnPart) for p in parts)


def decide(script: Script):
    """`slow ...` waits on a slow tool, then says what it was told last (a steer); anything else
    streams ANSWER."""
    users, results = _texts(script)
    if users[0].startswith("slow"):
        return tool("slow", {"seconds": 3}, "call-slow") if not results else text(f"told: {users[-1]}")
    return text(ANSWER)


@asynccontextmanager
async def chromium() -> AsyncIterator[Browser]:
    async with async_playwright() as playwright:
        browser = await playwright.chromium.launch(executable_path=CHROMIUM)
        try:
            yield browser
        finally:
            await browser.close()


async def signed_in(browser: Browser, base: str, key: str) -> tuple[BrowserContext, Page]:
    context = await browser.new_context(viewport={"width": 1280, "height": 900})
    page = await context.new_page()
    await page.goto(f"{base}/console/sessions")
    await expect(page.get_by_role("heading", name="Sign in")).to_be_visible()
    await page.get_by_label("API key").fill(key)
    await page.get_by_role("button", name="Sign in").click()
    await expect(page.get_by_role("heading", name="Sessions")).to_be_visible()
    return context, page


async def photograph(page: Page, name: str) -> None:
    """The page as it is now, at each width (the page is put back at 1280 px)."""
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    for width in WIDTHS:
        await page.set_viewport_size({"width": width, "height": 900})
        await page.screenshot(path=ARTIFACTS / f"console-{name}-{width}.png", full_page=True)
    await page.set_viewport_size({"width": 1280, "height": 900})


async def start(page: Page, base: str, prompt: str) -> str:
    """Start a session from the sessions page; its id, once its page shows."""
    await page.goto(f"{base}/console/sessions")
    details = page.locator("details.new")
    if not await details.evaluate("d => d.open"):
        await details.locator("summary").click()
    await page.get_by_label("First prompt").fill(prompt)
    await page.get_by_role("button", name="Start").click()
    await page.wait_for_url(f"{base}/console/sessions/*")
    return page.url.rsplit("/", 1)[-1]


def own_tenants() -> tuple[str, ApiKeys]:
    """Keys `key-a` and `key-b` of two tenants no other test uses (lists and totals are the test's)."""
    tenant = f"console-{uuid.uuid4().hex[:8]}"
    return tenant, ApiKeys.load([], {"WOLF_API_KEYS": f"key-a={tenant},key-b={tenant}-b"})


async def test_the_console_signs_in_streams_steers_and_accounts(
    client, task_queue, run_worker, env, monkeypatch
):
    script = Script(decide, chunk_delay=0.05)
    tenant, keys = own_tenants()
    budgets = {"limits": {"usd_budget_session": 0.5, "usd_budget_turn": 0.1}}
    async with (
        run_worker(local_models={"m": script.model}),
        serving(client, task_queue, make_manifest(budgets), keys=keys) as base,
        chromium() as browser,
    ):
        # Signing in: a wrong key is refused on the page; the right one is kept HTTP-only.
        context = await browser.new_context(viewport={"width": 1280, "height": 900})
        page = await context.new_page()
        await page.goto(f"{base}/console/usage")
        await expect(page.get_by_role("heading", name="Sign in")).to_be_visible()
        await photograph(page, "login")
        await page.get_by_label("API key").fill("key-zzz")
        await page.get_by_role("button", name="Sign in").click()
        await expect(page.get_by_role("alert")).to_have_text("that API key is not one this server knows")
        await page.get_by_label("API key").fill("key-a")
        await page.get_by_role("button", name="Sign in").click()
        await expect(page.get_by_role("heading", name="Usage")).to_be_visible()  # back where it was going
        (cookie,) = await context.cookies()
        assert (cookie["name"], cookie["httpOnly"], cookie["secure"], cookie["sameSite"]) == (
            "__Host-wolf_console",
            True,
            True,
            "Strict",
        )
        assert cookie["path"] == "/" and "key-a" not in cookie["value"]  # a sign-in token, not the key
        assert await page.evaluate("document.cookie") == ""  # scripts cannot read the key

        # A session's answer streams into the page (before the turn ends: its text grows).
        sid = await start(page, base, "write something")
        said = page.locator("#conversation .msg.assistant .text").first
        await expect(said).to_have_text(ANSWER, timeout=30_000)
        assert await page.evaluate("window.wolfSession.deltas") >= 1  # it came as text deltas
        await expect(page.locator("#timeline .turn.completed")).to_have_count(1, timeout=30_000)
        await expect(page.locator("#state")).to_have_text("idle")
        await expect(page.get_by_role("link", name="Workflow in the Temporal UI")).to_have_attribute(
            "href", f"http://localhost:8233/namespaces/default/workflows/wolf%2F{tenant}%2F{sid}"
        )
        await photograph(page, "session")
        await page.goto(f"{base}/console/sessions/wolf%2F{tenant}%2F{sid}")  # as the Temporal UI names it
        await expect(page).to_have_url(f"{base}/console/sessions/{sid}")

        # Steering a running turn: the model's next request reads it.
        await start(page, base, "slow then answer")
        await expect(page.locator(".tool .by")).to_have_text("tool slow", timeout=30_000)
        await page.get_by_label("Message").fill("steer left")
        await page.get_by_role("button", name="Steer the running turn").click()
        await expect(page.locator("#notice")).to_contain_text("steer sent")
        await expect(page.locator(".msg.steer .text")).to_have_text("steer left", timeout=30_000)
        await expect(page.locator(".msg.assistant .text").last).to_have_text("told: steer left")
        # A prompt on an idle session starts another turn there.
        await page.get_by_label("Message").fill("and again")
        await page.get_by_role("button", name="Send as a new turn").click()
        await expect(page.locator("#timeline .turn")).to_have_count(2, timeout=30_000)
        await expect(page.locator("#state")).to_have_text("idle", timeout=30_000)
        steered = page.url.rsplit("/", 1)[-1]
        await record_history(client, workflow_id(tenant, steered), "last_activity")
        # A long session's page replays only its latest events, and links to the whole of it.
        monkeypatch.setattr(pages, "EVENTS_SHOWN", 4)
        await page.reload()
        await expect(page.locator("#earlier")).to_contain_text("The latest 4 of")
        await expect(page.locator("#timeline .turn")).to_have_count(1)  # only the last turn's end
        await page.get_by_role("link", name="Show the whole conversation").click()
        await expect(page.locator("#timeline .turn")).to_have_count(2)
        await expect(page.locator("#earlier")).to_have_count(0)

        # The list: both sessions, their figures, a state filter.
        await page.goto(f"{base}/console/sessions")
        rows = page.locator("table.sessions tbody tr[data-session]")
        await expect(rows).to_have_count(2)
        await expect(page.locator(f'tr[data-session="{sid}"] [data-fig="turns"]')).to_have_text("1")
        # Last activity: the steered session changed state after the first one did; newest first.
        times = {s: page.locator(f'tr[data-session="{s}"] [data-active] time') for s in (sid, steered)}
        active = {s: datetime.fromisoformat(str(await t.get_attribute("datetime"))) for s, t in times.items()}
        assert active[steered] > active[sid], active
        recently = re.compile(r"just now|\d+ min ago")
        await expect(page.locator(f'tr[data-session="{steered}"] [data-active]')).to_have_text(recently)
        started = page.locator(f'tr[data-session="{steered}"] td[data-label="Started"] time')
        # WolfActive, set at its last state change, not its start:
        assert active[steered] > datetime.fromisoformat(str(await started.get_attribute("datetime")))
        await page.get_by_label("Order").select_option("active")
        await page.get_by_role("button", name="Filter").click()
        await expect(rows.first).to_have_attribute("data-session", steered)
        await expect(page.locator("#sorted-here")).to_be_visible()  # the dev server's SQL visibility
        await photograph(page, "sessions")
        await page.get_by_label("State").select_option("running")
        await page.get_by_role("button", name="Filter").click()
        await expect(page.get_by_text("No sessions match these filters.")).to_be_visible()

        # Usage over the last 24 hours: the totals are `wolf usage --json --since <its start>`'s, and
        # the chart's bars add up to them; the agent's budgets stand beside what it spent.
        await page.goto(f"{base}/console/usage")
        await page.get_by_label("Sessions started in the last").select_option("24h")
        await page.get_by_role("button", name="Show").click()
        await expect(page.locator("#since")).to_have_attribute("datetime", re.compile(r":00:00\+00:00$"))
        since = await page.locator("#since").get_attribute("datetime")
        address = env.client.service_client.config.target_host
        cli = await asyncio.to_thread(
            subprocess.run,
            [WOLF, "usage", "--json", "--tenant", tenant, "--address", address, "--since", str(since)],
            capture_output=True,
            text=True,
        )
        assert cli.returncode == 0, cli.stderr
        report = json.loads(cli.stdout)
        shown = {
            name: await page.locator(f'[data-total="{name}"]').text_content()
            for name in ("sessions", "requests", "input_tokens", "output_tokens", "tool_calls")
        }
        total = report["total"]
        assert shown == {
            "sessions": str(report["sessions"]),
            **{k: str(total[k]) for k in ("requests", "input_tokens", "output_tokens", "tool_calls")},
        }
        assert total["requests"] == 4  # what this test's sessions asked (its tenant is its own)
        bars = await page.locator("#chart rect[data-group]").evaluate_all(
            "rs => rs.map(r => [r.dataset.group, Number(r.dataset.tokens), Number(r.dataset.requests)])"
        )
        assert {group for group, _, _ in bars} == {"a"}
        assert sum(t for _, t, _ in bars) == total["input_tokens"] + total["output_tokens"]
        assert sum(r for _, _, r in bars) == total["requests"]
        budget = page.locator('tr[data-budget="a"]')
        await expect(budget.locator("td")).to_have_text(["file", "0.5000", "0.1000", "2", "0.0000"])
        await expect(page.get_by_text("No session in this range is at 80 % of its budget.")).to_be_visible()
        await photograph(page, "usage")

        # Another tenant: the session is as unknown as a missing one, by page, stream or action.
        other, stranger = await signed_in(browser, base, "key-b")
        await expect(stranger.locator("table.sessions tbody tr[data-session]")).to_have_count(0)
        for path in (sid, "no-such-session"):
            answer = await stranger.goto(f"{base}/console/sessions/{path}")
            assert answer is not None and answer.status == 404
            await expect(stranger.get_by_role("alert")).to_have_text(f"session {path!r} not found")
        by_full_id = await stranger.goto(f"{base}/console/sessions/wolf%2F{tenant}%2F{sid}")
        assert by_full_id is not None and by_full_id.status == 404
        await expect(stranger.get_by_role("alert")).to_have_text(f"session 'wolf/{tenant}/{sid}' not found")
        elsewhere = await stranger.goto(f"{base}/console/no/such/page")
        assert elsewhere is not None and elsewhere.status == 404
        await expect(stranger.get_by_role("heading", name="Not found")).to_be_visible()
        probes = await stranger.evaluate(
            """async (sid) => {
                const form = {method: "POST", headers: {"Content-Type": "application/x-www-form-urlencoded",
                    "Accept": "application/json"}, body: "text=hi"};
                const events = await fetch(`/console/sessions/${sid}/events`);
                const steer = await fetch(`/console/sessions/${sid}/steer`, form);
                return [events.status, steer.status, (await steer.json()).error.message];
            }""",
            sid,
        )
        assert probes == [404, 404, f"session {sid!r} not found"]
        await other.close()

        # Other sites: a cross-origin post with the cookie, or one without an Origin, is refused.
        async with httpx.AsyncClient(base_url=base) as http:
            http.cookies.update(await console_cookie(http, "key-a"))
            form = {"Content-Type": "application/x-www-form-urlencoded"}
            forged = await http.post(
                f"/console/sessions/{sid}/close",
                content="x=1",
                headers={**form, "Origin": "http://evil.test"},
            )
            bare = await http.post(f"/console/sessions/{sid}/close", content="x=1", headers=form)
            framed = await http.get("/console/sessions")
        async with httpx.AsyncClient(base_url=base) as http:
            no_cookie = await http.get("/console/sessions")
        assert forged.status_code == bare.status_code == 403, (forged.text, bare.text)
        assert "frame-ancestors 'none'" in framed.headers["content-security-policy"]
        assert no_cookie.status_code == 401
        assert (await WolfClient(client, tenant=tenant).status(sid)).state == "idle"  # not closed
        await context.close()


async def test_without_keys_the_console_needs_no_sign_in_on_loopback(client, task_queue):
    tenant = f"open-{uuid.uuid4().hex[:6]}"
    async with (
        # A tenant of its own: the page asks every registry config of its tenant, and other tests'
        # (on this server, their workers gone) would each hold it for the listing's 10 s.
        serving(client, task_queue, make_manifest(), open_tenant=tenant) as base,
        httpx.AsyncClient(base_url=base, timeout=60) as http,
    ):
        login = await http.get("/console/login")
        listed = await http.get("/console/sessions", headers={"Accept": "text/html"})
        rebound = await http.get("/console/sessions", headers={"Host": "evil.test"})
    assert login.status_code == 303 and login.headers["location"] == "/console/sessions"
    assert listed.status_code == 200 and f"tenant <strong>{tenant}</strong>" in listed.text
    assert "Sign out" not in listed.text
    assert rebound.status_code == 403  # DNS rebinding: a page of another name reaching loopback


async def test_an_inbox_approval_runs_the_tool_once_across_a_killed_worker(env, client, task_queue, tmp_path):
    """The approval shows in the inbox; the worker is SIGKILLed while the page is open and another
    takes over; approving from the page runs the tool exactly once."""
    effects = tmp_path / "effects"

    def reply(request):
        done = tool_outputs(request)
        return (
            Reply(tool_calls=[("record", {"tag": "console"})])
            if not done
            else Reply(text=f"result: {done[0]}")
        )

    _, keys = own_tenants()
    with ScriptedOpenAI(reply) as provider:
        manifest = openai_manifest(
            provider.base_url,
            mcp_servers={"tools": tools_server(WOLF_SIDE_EFFECTS=str(effects))},
            permissions={"rules": [{"tool": "record", "action": "confirm"}]},
        )
        first = worker_process(env, task_queue)
        second = None
        try:
            async with serving(client, task_queue, manifest, keys=keys) as base, chromium() as browser:
                context, page = await signed_in(browser, base, "key-a")
                sid = await start(page, base, "record something")
                await expect(page.locator("#approvals .approval")).to_be_visible(timeout=60_000)
                await page.goto(f"{base}/console/approvals")
                card = page.locator(f'.approval:has(a[href$="/{sid}"])')
                await expect(card).to_be_visible()
                await expect(card.locator(".args")).to_contain_text('"tag": "console"')
                await photograph(page, "approvals")
                first.send_signal(signal.SIGKILL)
                first.wait()
                second = worker_process(env, task_queue)
                wolf = WolfClient(client, tenant=keys.principal("key-a").tenant, task_queue=task_queue)
                await wait_for(lambda: worker_polls(wolf, task_queue), timeout=120)
                await card.get_by_role("button", name="Approve", exact=True).click()
                await expect(page.locator("#notice")).to_have_text("approved", timeout=30_000)
                await expect(page.get_by_text("Nothing waits for approval.")).to_be_visible(timeout=30_000)
                await page.goto(f"{base}/console/sessions/{sid}")
                answer = page.locator(".msg.assistant .text").last
                await expect(answer).to_have_text("result: recorded console", timeout=60_000)
                await context.close()
        finally:
            for proc in (first, second):
                if proc is not None and proc.poll() is None:
                    proc.terminate()
                    try:
                        proc.wait(60)  # a worker drains its tasks first: slow on a busy machine
                    except subprocess.TimeoutExpired:
                        proc.kill()
                        proc.wait()
    assert effects.read_text().split() == ["console"]  # exactly once


async def test_configs_show_diffs_and_schedules_pause_from_the_console(client, task_queue, run_worker):
    tenant, keys = own_tenants()
    wolf = WolfClient(client, tenant=tenant, task_queue=task_queue)
    script = Script(decide)
    async with run_worker(local_models={"m": script.model}):
        await wolf.config_push("team", make_manifest({"instructions": "Be brief."}), note="first")
        await wolf.config_push("team", make_manifest({"instructions": "Be thorough."}), note="second")
        sid = await wolf.start_session("a", config_name="team")
        await wolf.schedule_create("nightly", cron="0 3 * * *", session=sid, prompt="report")
        try:
            async with serving(client, task_queue, keys=keys) as base, chromium() as browser:
                context, page = await signed_in(browser, base, "key-a")
                await page.get_by_role("link", name="Configs").click()
                await page.get_by_role("link", name="team").click()
                diff = page.locator("#diff")
                await expect(diff.locator(".del")).to_have_text(["-    instructions: Be brief."])
                await expect(diff.locator(".add")).to_have_text(["+    instructions: Be thorough."])
                await expect(
                    page.locator(f'tr[data-session="{sid}"] [data-fig="config_version"]')
                ).to_have_text(" v2", timeout=30_000)
                await photograph(page, "config")
                await page.get_by_label("From version").select_option("2")
                await page.get_by_role("button", name="Compare").click()
                await expect(page.get_by_text("No differences.")).to_be_visible()

                await page.get_by_role("link", name="Schedules").click()
                row = page.locator('tr[data-schedule="nightly"]')
                await expect(row).to_contain_text(f"session {sid}")
                await expect(row.locator("time")).to_have_count(3)  # the next firings
                await photograph(page, "schedules")
                await row.get_by_role("button", name="Pause nightly").click()
                await expect(row.get_by_role("button", name="Resume nightly")).to_be_visible()
                assert (await wolf.schedule_describe("nightly")).paused
                await context.close()
        finally:
            await wolf.schedule_delete("nightly")
            await wolf.close(sid)


async def test_the_login_keeps_keys_off_plain_http_and_goes_only_to_console_pages(client, task_queue):
    async with serving(client, task_queue, make_manifest()) as base, httpx.AsyncClient(base_url=base) as http:
        port = base.rsplit(":", 1)[1]

        async def login(body: str, host: str = "127.0.0.1") -> httpx.Response:
            headers = {
                "Content-Type": "application/x-www-form-urlencoded",
                "Host": f"{host}:{port}",
                "Origin": f"http://{host}:{port}",
            }
            return await http.post("/console/login", content=body, headers=headers)

        remote = await login("key=key-a", host="console.example")
        away = [
            await login(f"key=key-a&next={n}") for n in ("//evil.test/x", "https://evil.test", "/v1/models")
        ]
        inside = await login("key=key-a&next=/console/usage")
    assert remote.status_code == 400 and "sign in over HTTPS" in remote.text
    assert "set-cookie" not in remote.headers
    assert [a.headers["location"] for a in away] == ["/console/sessions"] * 3
    assert inside.headers["location"] == "/console/usage"
    assert "HttpOnly" in inside.headers["set-cookie"] and "Secure" in inside.headers["set-cookie"]


async def test_a_key_limited_to_other_agents_sees_none_of_this_one(client, task_queue, run_worker):
    """Same tenant, a key that may use only agent `b`: agent `a`'s session is not listed, not found,
    has no figures and no usage page, as the APIs treat that key."""
    tenant = f"console-{uuid.uuid4().hex[:8]}"
    keys = ApiKeys(
        [
            ApiKeyEntry(sha256=digest("key-all"), tenant=tenant),
            ApiKeyEntry(sha256=digest("key-b-only"), tenant=tenant, agents=frozenset({"b"})),
        ]
    )
    manifest = make_manifest()
    script = Script(decide)
    async with run_worker(local_models={"m": script.model}):
        sid = await WolfClient(client, tenant=tenant, task_queue=task_queue).start_session("a", manifest)
        async with (
            serving(client, task_queue, manifest, keys=keys) as base,
            httpx.AsyncClient(base_url=base) as everyone,
            httpx.AsyncClient(base_url=base) as limited,
        ):
            everyone.cookies.update(await console_cookie(everyone, "key-all"))
            limited.cookies.update(await console_cookie(limited, "key-b-only"))
            html = {"Accept": "text/html"}
            assert sid in (await everyone.get("/console/sessions", headers=html)).text
            assert sid not in (await limited.get("/console/sessions", headers=html)).text
            assert (await everyone.get(f"/console/sessions/{sid}", headers=html)).status_code == 200
            assert (await limited.get(f"/console/sessions/{sid}", headers=html)).status_code == 404
            assert (await limited.get(f"/console/sessions/{sid}/events")).status_code == 404
            assert (await everyone.get("/console/figures", params={"id": sid})).json()[sid]["turns"] == 0
            assert (await limited.get("/console/figures", params={"id": sid})).json()[sid]["turns"] is None
            assert (await limited.get("/console/usage", headers=html)).status_code == 403
