"""USD cost on the real stack: priced on the worker (genai-prices, or the manifest's prices), carried
in usage events and counters, rolled up from subagents, enforced by USD budgets, reported by
`wolf usage`."""

from __future__ import annotations

import json
import uuid

import genai_prices
import pytest
from pydantic_ai.messages import ModelResponse, TextPart, ToolCallPart, ToolReturnPart
from pydantic_ai.usage import RequestUsage

from agentwolf.client.wolf_client import WolfClient
from agentwolf.config.manifest import Manifest
from agentwolf.workflows.types import Event, workflow_id
from tests.conftest import record_history, tools_server
from tests.support.models import Script
from tests.support.openai_server import USAGE_RESPONSES, Reply, ScriptedOpenAI, tool_outputs
from tests.test_cli import _wolf

PER_MTOK = {"input_per_mtok": 2.0, "output_per_mtok": 10.0}
REQUEST_USD = (1000 * 2.0 + 500 * 10.0) / 1e6
"""What one scripted request (1000 tokens in, 500 out) costs at PER_MTOK."""


def _usage(response: ModelResponse) -> ModelResponse:
    response.usage = RequestUsage(input_tokens=1000, output_tokens=500)
    return response


def _adding(times: int) -> Script:
    """Per session: `add` `times` times (different arguments: no loop guard), then answer."""

    def decide(s: Script) -> ModelResponse:
        done = sum(isinstance(p, ToolReturnPart) for m in s.requests[-1] for p in getattr(m, "parts", []))
        if done < times:
            call = ToolCallPart("add", {"a": done, "b": 1}, tool_call_id=f"c{done + 1}")
            return _usage(ModelResponse(parts=[call]))
        return _usage(ModelResponse(parts=[TextPart("done")]))

    return Script(decide)


def _manifest(agents: dict, prices: dict | None = None, **sessions: object) -> Manifest:
    host = {"mcp_servers": {"tools": tools_server()}, "sessions": sessions}
    if prices is not None:
        host["models"] = {"prices": prices, "aliases": {"cheap": "local:m"}}
    return Manifest.model_validate({"host": host, "agents": agents})


async def _events(wolf: WolfClient, sid: str) -> list[Event]:
    return [e async for _, e in wolf.events(sid, live=False)]


async def test_cost_of_a_provider_request_is_genai_prices_figure(wolf, run_worker):
    def reply(request):
        return Reply(text="42") if tool_outputs(request) else Reply(tool_calls=[("add", {"a": 40, "b": 2})])

    usage = genai_prices.Usage(
        input_tokens=USAGE_RESPONSES["input_tokens"], output_tokens=USAGE_RESPONSES["output_tokens"]
    )
    figure = float(genai_prices.calc_price(usage, "gpt-4o-mini", provider_id="openai").total_price)
    assert figure > 0
    with ScriptedOpenAI(reply) as server:
        manifest = Manifest.model_validate(
            {
                "host": {
                    "models": {"providers": {"openai": {"api_key": "k", "base_url": server.base_url}}},
                    "mcp_servers": {"tools": tools_server()},
                },
                "agents": {"a": {"model": "openai:gpt-4o-mini", "capabilities": [{"mcp": "tools"}]}},
            }
        )
        async with run_worker():
            sid = await wolf.submit("add", "a", manifest)
            result = await wolf.result(sid)
            events = await _events(wolf, sid)
    assert result.output == "42"
    counters = result.counters
    assert counters.usage.requests == 2 and counters.usage.unpriced_requests == 0
    assert counters.usage.cost_usd == pytest.approx(2 * figure)
    assert counters.models["openai:gpt-4o-mini"].cost_usd == pytest.approx(2 * figure)
    finished = next(e for e in events if e.kind == "turn_finished")
    assert finished.usage is not None and finished.usage.cost_usd == pytest.approx(2 * figure)


async def test_manifest_prices_by_spec_and_alias_and_unknown_models_cost_null(wolf, run_worker):
    agents = {
        "priced": {"model": "local:m", "capabilities": [{"mcp": "tools"}]},
        "aliased": {"model": "cheap", "capabilities": [{"mcp": "tools"}]},
        "unknown": {"model": "local:u", "capabilities": [{"mcp": "tools"}]},
    }
    async with run_worker(local_models={"m": _adding(1).model, "u": _adding(1).model}):
        spec = await wolf.submit("go", "priced", _manifest(agents, {"local:m": PER_MTOK}))
        alias = await wolf.submit("go", "aliased", _manifest(agents, {"cheap": PER_MTOK}))
        unknown = await wolf.submit("go", "unknown", _manifest(agents, {"local:m": PER_MTOK}))
        results = [await wolf.result(s) for s in (spec, alias, unknown)]
    for result in results[:2]:
        assert result.counters.usage.cost_usd == pytest.approx(2 * REQUEST_USD)
        assert result.counters.models["local:m"].requests == 2
    unpriced = results[2].counters.usage
    assert unpriced.cost_usd is None and unpriced.unpriced_requests == 2 and unpriced.input_tokens == 2000


def _delegating() -> Script:
    def boss(s: Script) -> ModelResponse:
        if s.calls == 1:
            call = ToolCallPart("delegate", {"agent": "helper", "task": "add"}, tool_call_id="d1")
            return _usage(ModelResponse(parts=[call]))
        return _usage(ModelResponse(parts=[TextPart("boss done")]))

    return Script(boss)


SUBAGENT_AGENTS = {
    "boss": {"model": "local:boss", "capabilities": [{"subagent": ["helper"]}]},
    "helper": {"model": "local:m", "capabilities": [{"mcp": "tools"}]},
}


async def test_a_subagents_cost_is_in_its_parents_turn(wolf, run_worker):
    prices = {"local:boss": PER_MTOK, "local:m": PER_MTOK}
    async with run_worker(local_models={"boss": _delegating().model, "m": _adding(2).model}):
        sid = await wolf.submit("delegate", "boss", _manifest(SUBAGENT_AGENTS, prices))
        result = await wolf.result(sid)
        events = await _events(wolf, sid)
    assert result.output == "boss done"
    own, child = result.counters.usage, result.counters.subagents
    assert own.cost_usd == pytest.approx(2 * REQUEST_USD)  # the boss's two requests
    assert child.cost_usd == pytest.approx(3 * REQUEST_USD) and child.tool_calls == 2  # the helper's
    finished = next(e for e in events if e.kind == "turn_finished")
    assert finished.usage is not None and finished.usage.cost_usd == pytest.approx(5 * REQUEST_USD)


async def test_a_usd_turn_budget_warns_at_80_percent_and_stops_the_turn_cleanly(wolf, run_worker):
    # 0.007 per request: 0.014 after two (70 %), 0.021 after three (past 80 % and 100 %).
    agents = {
        "a": {"model": "local:m", "capabilities": [{"mcp": "tools"}], "limits": {"usd_budget_turn": 0.02}}
    }
    script = _adding(10)
    async with run_worker(local_models={"m": script.model}):
        sid = await wolf.start_session("a", _manifest(agents, {"local:m": PER_MTOK}))
        await wolf.prompt(sid, "add a lot")
        status = await _idle_after(wolf, sid, turns=1)
        await wolf.close(sid)  # its events end with it
        events = await _events(wolf, sid)
        transcript = await wolf.transcript(sid)
        await record_history(wolf.client, workflow_id(wolf.tenant, sid), "usd_budget_turn")
    kinds = [e.kind for e in events]
    assert status.last_outcome == "limit" and "USD budget of the turn" in (status.last_output or "")
    assert script.calls == 3  # stopped before a fourth request
    warning = kinds.index("limit_warning")
    assert "80% of the turn's USD budget" in (events[warning].text or "")
    assert warning < kinds.index("limit_reached") < kinds.index("turn_finished")
    assert status.counters.usage.cost_usd == pytest.approx(3 * REQUEST_USD)
    # The third step's call was closed, not left dangling: the transcript ends with its result.
    assert transcript[-1].parts[0].tool_call_id == "c3"


async def test_a_usd_session_budget_counts_subagents_and_holds_across_continue_as_new(wolf, run_worker):
    agents = {
        **SUBAGENT_AGENTS,
        "boss": {**SUBAGENT_AGENTS["boss"], "limits": {"usd_budget_session": 0.03}},
    }
    prices = {"local:boss": PER_MTOK, "local:m": PER_MTOK}
    boss = _delegating()
    # A tiny history limit: the session continues as new at its first idle point.
    manifest = _manifest(agents, prices, continue_as_new_bytes=1000)
    async with run_worker(local_models={"boss": boss.model, "m": _adding(2).model}):
        sid = await wolf.start_session("boss", manifest)
        await wolf.prompt(sid, "first")
        first = await _idle_after(wolf, sid, turns=1)
        await wolf.prompt(sid, "second")
        second = await _idle_after(wolf, sid, turns=2, continued=True)
    # Turn one: the boss's 0.014 and the helper's 0.021 = 0.035 >= 0.03 (the turn ended on its own).
    assert first.last_outcome == "completed"
    assert first.counters.total.cost_usd == pytest.approx(5 * REQUEST_USD)
    assert second.counters.continued_as_new >= 1
    assert second.last_outcome == "limit" and "USD budget of the session" in (second.last_output or "")
    assert boss.calls == 2  # the second turn stopped before any model request


async def _idle_after(wolf: WolfClient, sid: str, turns: int, continued: bool = False):
    from tests.conftest import wait_for

    async def done():
        status = await wolf.status(sid)
        ok = status.state == "idle" and status.counters.turns >= turns
        return status if ok and (not continued or status.counters.continued_as_new) else None

    return await wait_for(done, timeout=60)


async def test_wolf_usage_json_sums_what_the_sessions_spent(env, client, task_queue, run_worker):
    tenant = f"usage-{uuid.uuid4().hex[:6]}"
    wolf = WolfClient(client, tenant=tenant, task_queue=task_queue)
    prices = {"local:boss": PER_MTOK, "local:m": PER_MTOK}
    manifest = _manifest(SUBAGENT_AGENTS, prices)
    async with run_worker(local_models={"boss": _delegating().model, "m": _adding(1).model}):
        parent = await wolf.submit("delegate", "boss", manifest)
        alone = await wolf.submit("add", "helper", manifest)
        spent = [await wolf.result(s) for s in (parent, alone)]
        running = await wolf.start_session("helper", manifest)  # idle, never prompted: asked by query
        address = client.service_client.config.target_host
        run = await _wolf(address, "usage", "--tenant", tenant, "--by", "agent", "--json")
        by_model = await wolf.usage(by="model")
        await wolf.close(running)
    assert run.returncode == 0, run.stderr
    report = json.loads(run.stdout)
    # parent (2 requests) + its helper child (2) + the lone helper (2): each counted once.
    expected = spent[0].counters.total.cost_usd + spent[1].counters.usage.cost_usd
    assert expected == pytest.approx(6 * REQUEST_USD)
    assert report["sessions"] == 4 and report["unreadable"] == []
    assert report["total"]["cost_usd"] == pytest.approx(expected)
    rows = {r["key"]: r for r in report["rows"]}
    assert rows["boss"]["usage"]["cost_usd"] == pytest.approx(2 * REQUEST_USD)
    assert rows["helper"]["sessions"] == 3 and rows["helper"]["usage"]["cost_usd"] == pytest.approx(
        4 * REQUEST_USD
    )
    assert {r.key for r in by_model.rows} == {"local:boss", "local:m"}
    assert by_model.total.cost_usd == pytest.approx(expected)
