"""Every file in examples/ runs here as the docs tell a user to run it, against the suite's dev server
and a real worker on the offline models (the docs include these files as they are)."""

from __future__ import annotations

import asyncio
import json
import os
import re
import sys
import uuid
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from agentwolf.cli.sources import BUNDLED_CONFIG
from agentwolf.client.wolf_client import WolfClient
from agentwolf.config.loading import load_manifest
from agentwolf.defaults import TASK_QUEUE
from tests.conftest import wait_for
from tests.support.polls import idle, in_state
from tests.support.serving import serving
from tests.test_serve_agui import NODE, needs_node

ROOT = Path(__file__).parent.parent
EXAMPLES = ROOT / "examples"
RUNS: dict[str, str] = {}
"""Each example file -> the test that runs it."""


def runs(*names: str):
    def mark(test):
        for name in names:
            RUNS[name] = test.__name__
        return test

    return mark


@pytest.fixture
def offline(monkeypatch: pytest.MonkeyPatch) -> dict[str, str]:
    """The environment of an example's process: the demo models, whatever this shell has set."""
    monkeypatch.delenv("WOLF_MODEL", raising=False)
    return {**os.environ, "NO_COLOR": "1"}


async def run(*args: str, env: dict[str, str], timeout: float = 120) -> str:
    """Run a command from the repository's root, as the docs do; its stdout (fails with its stderr)."""
    proc = await asyncio.create_subprocess_exec(
        *args, cwd=ROOT, env=env, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE
    )
    try:
        stdout, stderr = await asyncio.wait_for(proc.communicate(), timeout)
    except TimeoutError:
        proc.kill()
        stdout, stderr = await proc.communicate()
        raise AssertionError(
            f"{args} ran past {timeout} s; stdout:\n{stdout.decode()}\nstderr:\n{stderr.decode()}"
        ) from None
    finally:
        if proc.returncode is None:
            proc.kill()
            await proc.wait()
    assert proc.returncode == 0, stderr.decode()
    return stdout.decode()


@pytest.fixture
async def demo_server(client, task_queue, run_worker) -> AsyncIterator[str]:
    """`wolf serve`'s app on the bundled example (the test keys), with a worker: its base URL."""
    async with run_worker(), serving(client, task_queue, load_manifest(BUNDLED_CONFIG)) as base:
        yield base


def address(client) -> str:
    return client.service_client.config.target_host


@runs("notes_plugin.py", "notes.yaml", "embed_notes.py")
async def test_embedding_the_notes_plugin(client, offline):
    out = await run(sys.executable, "examples/embed_notes.py", address(client), env=offline)
    assert out.strip() == "Done: noted (1 so far)"


@runs("python_client.py")
async def test_the_python_client_streams_the_demo_s_answer(client, run_worker, offline):
    async with run_worker(task_queue=TASK_QUEUE):
        out = await run(sys.executable, "examples/python_client.py", address(client), env=offline)
    assert "[get_current_time]" in out
    assert re.search(r"It is \d\d:\d\d on \w+day in Asia/Tokyo", out), out
    assert re.search(r"^completed: \d+ characters$", out, re.MULTILINE), out


@runs("helper.yaml")
async def test_the_quickstart_s_own_manifest_answers(client, run_worker, offline):
    async with run_worker(task_queue=TASK_QUEUE):
        out = await run(
            "wolf", "submit", "What time is it in UTC?", "--config",
            "examples/helper.yaml", "--address", address(client), "--wait", "--json", env=offline,
        )  # fmt: skip
    assert re.match(r"It is \d\d:\d\d on \w+day in UTC \(UTC\+00:00\)\.", json.loads(out)["output"]), out


@runs("capabilities_plugin.py", "capabilities.yaml")
async def test_the_seed_s_capabilities_route_inject_and_validate(wolf, run_worker, monkeypatch):
    """The router picks a model per turn (recorded: the provider saw it, status counts it), context
    injection sends the file the prompt names for that request only, URI validation marks a URI that
    does not resolve."""
    from agentwolf.plugins import load_plugins
    from tests.support.openai_server import Reply, ScriptedOpenAI

    monkeypatch.syspath_prepend(str(EXAMPLES))
    real = f"file://{ROOT}/docs/guides/capabilities.md"
    with ScriptedOpenAI(lambda body: Reply(text=f"See {real} and file:///nowhere/notes.md.")) as server:
        monkeypatch.setenv("OPENAI_BASE_URL", server.base_url)
        monkeypatch.setenv("OPENAI_API_KEY", "k")
        manifest = load_manifest(EXAMPLES / "capabilities.yaml")
        plugins = load_plugins(["capabilities_plugin"], entry_points=[])
        async with run_worker(plugins=plugins):
            sid = await wolf.start_session("researcher", manifest)
            await wolf.prompt(sid, "What do the capabilities docs say?")
            await wait_for(lambda: _turns_done(wolf, sid, 1))
            await wolf.prompt(sid, "Design an architecture for our deploys.")
            await wait_for(lambda: _turns_done(wolf, sid, 2))
            status = await wolf.status(sid)
            transcript = await wolf.transcript(sid)
            await wolf.close(sid)
            events = [e async for _, e in wolf.events(sid, live=False)]  # it ends as the session does
    said = [e.model for e in events if e.kind == "model_text"]
    assert said == [None, "openai:gpt-5"]  # the step a capability routed names its model
    first, second = server.requests
    assert (first["model"], second["model"]) == ("gpt-4o-mini", "gpt-5")  # fast, then smart
    assert {"openai:gpt-4o-mini", "openai:gpt-5"} <= set(status.counters.models)
    assert "## capabilities.md" in json.dumps(first["input"])  # the named file went as context
    assert "## capabilities.md" not in json.dumps(second["input"])  # for that request only
    answers = [m.parts[-1].content for m in transcript if m.kind == "response"]  # type: ignore[union-attr]
    assert answers[0] == f"See {real} and file:///nowhere/notes.md [INVALID]."


async def _turns_done(wolf: WolfClient, sid: str, n: int) -> bool:
    status = await wolf.status(sid)
    return status.state == "idle" and status.counters.turns >= n


@runs("openai_client.py")
async def test_the_openai_sdk_talks_to_wolf_serve(demo_server, offline):
    out = await run(sys.executable, "examples/openai_client.py", f"{demo_server}/v1", "key-a", env=offline)
    lines = out.splitlines()
    assert lines[0] == "agents: ['assistant']"
    assert "Asia/Tokyo" in lines[1]
    assert "Australia/Sydney" in lines[-2] and "Europe/London" in lines[-1], out


@runs("a2a_client.py")
async def test_an_a2a_client_talks_to_wolf_serve(demo_server, offline):
    url = f"{demo_server}/a2a/assistant"
    out = await run(sys.executable, "examples/a2a_client.py", url, "key-a", env=offline)
    answer, state = out.rstrip("\n").rsplit("\n", 1)
    assert re.match(r"It is \d\d:\d\d on \w+day in Asia/Tokyo", answer), out
    assert state == "TASK_STATE_COMPLETED"


@runs("agui_client.mjs")
@needs_node
async def test_an_ag_ui_client_talks_to_wolf_serve(demo_server, offline):
    url = f"{demo_server}/agui/assistant"
    out = await run(NODE or "node", "examples/agui_client.mjs", url, "key-a", env=offline)
    assert "[get_current_time]" in out
    assert re.search(r"It is \d\d:\d\d on \w+day in Asia/Tokyo", out), out
    assert re.search(r"^thread [0-9a-f-]{36}$", out, re.MULTILINE), out


@runs("mcp_client.py")
async def test_an_mcp_client_asks_an_agent_through_wolf_mcp(client, run_worker, offline):
    async with run_worker(task_queue=TASK_QUEUE):
        out = await run(sys.executable, "examples/mcp_client.py", "--address", address(client), env=offline)
    lines = out.splitlines()
    assert lines[0] == "tools: ['ask_assistant', 'wolf_approve']"
    assert any(line.strip().startswith("calling get_current_time(") for line in lines), out
    assert re.search(r"^turn-1 completed It is .* in Asia/Tokyo", out, re.MULTILINE), out
    assert re.search(r"^turn-2 completed It is .* in Europe/London", out, re.MULTILINE), out


def wolf_cli(client, *args: str) -> tuple[str, ...]:
    """A `wolf` command line against the suite's dev server."""
    return ("wolf", *args, "--address", address(client))


@runs("approvals.yaml")
async def test_a_confirm_rule_holds_the_call_until_a_person_approves_it(client, run_worker, offline):
    wolf = WolfClient(client, task_queue=TASK_QUEUE)
    config = ("--config", "examples/approvals.yaml")
    async with run_worker(task_queue=TASK_QUEUE):
        asked = await run(
            *wolf_cli(client, "submit", "What time is it in Europe/Paris?", *config, "-j"), env=offline
        )
        sid = json.loads(asked)["session_id"]
        await wait_for(lambda: in_state(wolf, sid, "waiting_approval"))
        status = json.loads(await run(*wolf_cli(client, "status", sid, "-j"), env=offline))
        [call] = status["pending_approvals"]
        assert call["tool"].endswith("get_current_time") and call["args"] == {"timezone": "Europe/Paris"}
        await run(*wolf_cli(client, "approve", sid, call["call_id"]), env=offline)
        result = json.loads(await run(*wolf_cli(client, "result", sid, "-j"), env=offline))
    assert re.match(r"It is \d\d:\d\d on \w+day in Europe/Paris", result["output"]), result


@runs("steering.yaml")
async def test_a_steer_sent_while_the_slow_demo_thinks_changes_that_turn(client, run_worker, offline):
    """The docs' steering example shows something offline: `local:slow` thinks before each step, so a
    steer sent while the turn runs reaches its next model request, and an interrupt stops a turn. The
    steer goes by the client: on a busy machine `wolf steer` takes seconds just to start, which could
    miss the think time (test_cli steers from a second process)."""
    wolf = WolfClient(client, task_queue=TASK_QUEUE)
    config = ("--config", "examples/steering.yaml")
    async with run_worker(task_queue=TASK_QUEUE):
        asked = await run(
            *wolf_cli(client, "submit", "What time is it in Asia/Tokyo?", *config, "-j"), env=offline
        )
        sid = json.loads(asked)["session_id"]
        await wait_for(lambda: in_state(wolf, sid, "running"))
        await wolf.steer(sid, "Make it in Europe/London instead.")
        result = json.loads(await run(*wolf_cli(client, "result", sid, "-j"), env=offline))
        assert re.match(r"It is \d\d:\d\d on \w+day in Europe/London", result["output"]), result
        events = [event async for _, event in wolf.events(sid, live=False)]
        [started] = [e for e in events if e.kind == "turn_started"]  # one turn: the steer started none
        [applied] = [e for e in events if e.kind == "steer_applied"]
        assert applied.turn_id == started.turn_id

        kept = await run(
            *wolf_cli(client, "submit", "What time is it in Asia/Tokyo?", *config, "-k", "-j"), env=offline
        )
        sid = json.loads(kept)["session_id"]
        await wait_for(lambda: in_state(wolf, sid, "running"))
        await run(*wolf_cli(client, "interrupt", sid, "-r", "changed my mind"), env=offline)
        await wait_for(lambda: idle(wolf, sid, 1))
        assert (await wolf.status(sid)).last_outcome == "interrupted"
        await run(*wolf_cli(client, "close", sid), env=offline)


@runs("jobs.yaml")
async def test_the_triage_job_runs_by_hand_on_a_schedule_and_from_a_webhook(
    client, run_worker, offline, monkeypatch
):
    from tests.test_hooks import BODY, posting, sign

    wolf = WolfClient(client, task_queue=TASK_QUEUE)
    config = ("--config", "examples/jobs.yaml")
    issue = "https://github.com/o/r/issues/7"
    typed = {"severity": "low", "summary": f"Offline demo answer to: Triage issue {issue} for main."}
    async with run_worker(task_queue=TASK_QUEUE):
        ran = await run(
            *wolf_cli(client, "run", "triage", *config, "-v", f"issue_url={issue}", "-j"), env=offline
        )
        assert json.loads(ran)["output"] == typed, ran

        name = f"nightly-{uuid.uuid4().hex[:8]}"
        timing = ("--cron", "0 3 * * *", "--job", "triage", "-v", f"issue_url={issue}")
        await run(*wolf_cli(client, "schedule", "create", name, *timing, *config, "-j"), env=offline)
        try:
            await run(*wolf_cli(client, "schedule", "trigger", name, "-j"), env=offline)
            fired = await wait_for(lambda: _schedule_run(wolf, name))
            assert (await wolf.job_result(fired)).output == typed
        finally:
            await run(*wolf_cli(client, "schedule", "delete", name), env=offline)

        monkeypatch.setenv("HOOK_SECRET", "hook-secret-value-1234")
        async with posting(client, TASK_QUEUE, load_manifest(EXAMPLES / "jobs.yaml")) as http:
            body = json.dumps({**BODY, "nonce": uuid.uuid4().hex}).encode()
            posted = await http.post(
                "/hooks/new-issue", content=body, headers={"X-Wolf-Signature-256": sign(body)}
            )
            assert posted.status_code == 202, posted.text
            hooked = await wolf.job_result(posted.json()["session_id"])
    summary = (
        f"Offline demo answer to: Triage issue {BODY['issue']['html_url']} for {BODY['repository']['name']}."
    )
    assert hooked.output == {"severity": "low", "summary": summary}


async def _schedule_run(wolf: WolfClient, name: str) -> str | None:
    """The session a schedule's firing started (its id begins `_<name>-`), once there is one."""
    sessions = await wolf.list_sessions()
    return next((s.session_id for s in sessions if s.session_id.startswith(f"_{name}-")), None)


def test_every_example_runs_in_a_test_and_the_docs_show_it_as_it_is():
    examples = sorted(p.name for p in EXAMPLES.iterdir() if p.is_file())
    assert sorted(RUNS) == examples
    docs = "".join(page.read_text() for page in (ROOT / "docs").rglob("*.md"))
    included = set(re.findall(r'^--8<-- "examples/([^"]+)"$', docs, re.MULTILINE))
    assert included == set(examples), "each example is included (--8<--) in a docs page"


def _yaml_blocks() -> list[tuple[str, str]]:
    blocks = []
    for page in sorted((ROOT / "docs").rglob("*.md")):
        for block in re.findall(r"^```yaml\n(.*?)^```", page.read_text(), re.MULTILINE | re.DOTALL):
            if not block.startswith("--8<--"):
                blocks.append((str(page.relative_to(ROOT)), block))
    return blocks


@pytest.mark.parametrize(("page", "block"), _yaml_blocks())
def test_every_manifest_and_policy_in_the_docs_loads(page, block, tmp_path):
    """A reader copies these: each YAML block of the docs is a whole manifest, or a worker policy."""
    import yaml

    from agentwolf.config import parse_manifest
    from agentwolf.config.manifest import Manifest
    from agentwolf.config.policy import load_policy

    if set(yaml.safe_load(block)) <= set(Manifest.model_fields):
        parse_manifest(block, source=page)
    else:
        (tmp_path / "policy.yaml").write_text(block)
        load_policy(tmp_path / "policy.yaml")
