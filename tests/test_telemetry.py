"""Observability on real parts: spans a real OTLP/HTTP exporter sends to a receiver started here,
Prometheus metrics scraped from a worker's --metrics-port, JSON logs, MCP servers' stderr files."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest

from agentwolf.client.wolf_client import WolfClient, connect
from agentwolf.config.manifest import McpServerConfig
from agentwolf.extensions.pool import McpPool
from agentwolf.telemetry import tracing
from agentwolf.worker.bootstrap import create_worker
from tests.conftest import (
    TOOLS_SERVER,
    make_manifest,
    openai_manifest,
    tools_server,
    wait_for,
    worker_process,
)
from tests.support.models import Script, sequence, text, tool
from tests.support.openai_server import Reply, ScriptedOpenAI, tool_outputs
from tests.support.otlp_receiver import OtlpReceiver, Span
from tests.support.polls import idle
from tests.support.processes import end

TRACE_ENV = {"OTEL_EXPORTER_OTLP_ENDPOINT": "", "OTEL_BSP_SCHEDULE_DELAY": "50"}


@pytest.fixture(scope="module")
def receiver() -> Iterator[OtlpReceiver]:
    """Tracing on for this module's clients and workers (the tracer provider is process-wide)."""
    receiver = OtlpReceiver()
    saved = {name: os.environ.get(name) for name in TRACE_ENV}
    os.environ.update({**TRACE_ENV, "OTEL_EXPORTER_OTLP_ENDPOINT": receiver.endpoint})
    yield receiver
    tracing._state.pop("provider").shutdown()  # exports what is left; later modules connect untraced
    tracing._state.clear()
    for name, value in saved.items():
        if value is None:
            os.environ.pop(name, None)
        else:
            os.environ[name] = value
    receiver.close()


def _trace(receiver: OtlpReceiver, session_id: str) -> list[Span]:
    """Every span of the trace the session's start began."""
    (start,) = [
        s for s in receiver.named("StartWorkflow:") if s.attributes["temporalWorkflowID"].endswith(session_id)
    ]
    return [s for s in receiver.spans if s.trace_id == start.trace_id]


async def test_one_trace_links_the_client_the_workflow_its_activities_the_model_and_the_mcp_call(
    env, receiver, task_queue
):
    client = await connect(env.client.service_client.config.target_host)
    wolf = WolfClient(client, task_queue=task_queue)
    script = Script(sequence(tool("echo", {"text": "secret-ish payload"}), text("done")))
    worker, hosts = create_worker(client, task_queue=task_queue, local_models={"m": script.model})
    async with worker:
        sid = await wolf.submit("say it", "a", make_manifest())
        assert (await wolf.result(sid)).output == "done"
    await hosts.close()
    tracing.flush()
    spans = await wait_for(
        lambda: (t := _trace(receiver, sid)) and any(s.name.startswith("call_tool") for s in t) and t
    )
    names = {s.name for s in spans}
    assert {
        "RunWorkflow:SessionWorkflow",
        "RunActivity:wolf.model_request",
        "RunActivity:wolf.call_tool",
    } <= names
    assert any(s.attributes.get("gen_ai.usage.input_tokens") is not None for s in spans)  # pydantic-ai's span
    (call,) = [s for s in spans if s.name == "call_tool tools.echo"]
    assert call.attributes["mcp.server"] == "tools" and call.attributes["wolf.outcome"] == "ok"
    (run_call,) = [s for s in spans if s.name == "RunActivity:wolf.call_tool"]
    assert call.parent_id == run_call.span_id
    # Without WOLF_TRACE_CONTENT=1 no prompt, completion or tool payload is recorded anywhere.
    recorded = json.dumps([s.attributes for s in spans], default=str)
    assert "secret-ish payload" not in recorded and "say it" not in recorded


async def test_each_prompt_of_a_session_is_a_trace_of_its_own_with_its_turns_activities(
    env, receiver, task_queue
):
    """Temporal's interceptor alone would put every turn in the session's first trace."""
    client = await connect(env.client.service_client.config.target_host)
    wolf = WolfClient(client, task_queue=task_queue)
    script = Script(lambda s: text(f"answer {s.calls}"))
    worker, hosts = create_worker(client, task_queue=task_queue, local_models={"m": script.model})
    async with worker:
        sid = await wolf.start_session("a", make_manifest())
        for n in (1, 2):
            await wolf.prompt(sid, f"prompt {n}")
            await wait_for(lambda n=n: idle(wolf, sid, n))
        await wolf.close(sid)
    await hosts.close()

    def prompts() -> list[Span]:
        return [
            s
            for s in receiver.named("StartWorkflowUpdate:prompt")
            if s.attributes["temporalWorkflowID"].endswith(sid)
        ]

    def traced() -> bool:
        traces = {s.trace_id for s in prompts()}
        requests = [s for s in receiver.named("RunActivity:wolf.model_request") if s.trace_id in traces]
        return len(traces) == 2 and len(requests) == 2

    tracing.flush()
    await wait_for(traced)
    (start,) = [
        s for s in receiver.named("StartWorkflow:") if s.attributes["temporalWorkflowID"].endswith(sid)
    ]
    for prompt in prompts():
        assert prompt.trace_id != start.trace_id
        turn = [s for s in receiver.spans if s.trace_id == prompt.trace_id]
        (handled,) = [s for s in turn if s.name == "HandleUpdate:prompt"]
        assert handled.parent_id == prompt.span_id
        assert sum(s.name == "RunActivity:wolf.model_request" for s in turn) == 1
        assert any(s.attributes.get("gen_ai.usage.input_tokens") is not None for s in turn)


async def test_a_worker_killed_mid_turn_leaves_both_attempts_of_the_retried_activity_in_the_trace(
    env, receiver, task_queue
):
    wolf = WolfClient(await connect(env.client.service_client.config.target_host), task_queue=task_queue)

    def reply(request):
        done = tool_outputs(request)
        return Reply(tool_calls=[("slow", {"seconds": 3})]) if not done else Reply(text="finished")

    with ScriptedOpenAI(reply) as server:
        manifest = openai_manifest(server.base_url, mcp_servers={"tools": tools_server()})
        first, second = worker_process(env, task_queue), None
        try:
            sid = await wolf.submit("do the work", "a", manifest)
            # The slow call's first attempt has left its span before the kill.
            await wait_for(
                lambda: [
                    s for s in receiver.named("attempt:wolf.call_tool") if s.attributes["session"] == sid
                ],
                timeout=60,
            )
            first.send_signal(signal.SIGKILL)
            first.wait()
            second = worker_process(env, task_queue)
            assert (await wolf.result(sid)).output == "finished"
            attempts = await wait_for(
                lambda: (
                    len(a := [s for s in _trace(receiver, sid) if s.name == "attempt:wolf.call_tool"]) >= 2
                    and a
                ),
                timeout=30,
            )
        finally:
            for proc in (first, second):
                if proc is not None:
                    end(proc)
    # Two executions of the same call, by two worker processes, in the trace of the session's start.
    assert len({s.attributes["wolf.call_id"] for s in attempts}) == 1
    assert all(s.attributes["session"] == sid and s.attributes["tenant"] == "default" for s in attempts)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _scrape(port: int) -> str:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as answer:
        return answer.read().decode()


async def test_metrics_endpoint_shows_tokens_cost_and_tool_latency_and_json_logs_carry_the_session(
    env, wolf, task_queue, tmp_path
):
    def reply(request):
        return Reply(tool_calls=[("add", {"a": 2, "b": 3})]) if not tool_outputs(request) else Reply(text="5")

    port = _free_port()
    log = tmp_path / "worker.log"
    address = env.client.service_client.config.target_host
    with ScriptedOpenAI(reply) as server, open(log, "wb") as out:
        worker = subprocess.Popen(
            [sys.executable, "-m", "agentwolf.worker", "--address", address, "--task-queue", task_queue]
            + ["--metrics-port", str(port), "--log-format", "json"],
            stdout=out,
            stderr=out,
            env={**os.environ, "WOLF_HOME": str(tmp_path / "home")},
        )
        try:
            manifest = openai_manifest(server.base_url, mcp_servers={"tools": tools_server()})
            sid = await wolf.submit("add", "a", manifest)
            assert (await wolf.result(sid)).output == "5"
            page = await wait_for(lambda: (p := _scrape(port)) and "wolf_turns" in p and p, timeout=30)
        finally:
            worker.terminate()
            worker.wait(15)
    lines = page.splitlines()
    tokens = [line for line in lines if line.startswith("wolf_tokens_total{")]
    assert any(
        'kind="input"' in line and 'tenant="default"' in line and "gpt-4o-mini" in line for line in tokens
    )
    assert any(
        line.startswith("wolf_tool_call_seconds_count{") and 'tool="add"' in line and 'server="tools"' in line
        for line in lines
    )
    assert any(line.startswith("wolf_turns_total{") and 'outcome="completed"' in line for line in lines)
    costs = [line for line in lines if line.startswith("wolf_cost_usd_sum{") and "gpt-4o-mini" in line]
    assert costs and float(costs[0].rsplit(" ", 1)[1]) > 0  # genai-prices knows the model
    assert any(line.startswith("temporal_") for line in lines)  # the runtime's own, on the same endpoint
    records = [json.loads(line) for line in log.read_text().splitlines() if line.startswith("{")]
    assert records and all({"time", "level", "logger", "message"} <= r.keys() for r in records)
    assert any(r.get("session") == sid and r.get("tenant") == "default" for r in records)


async def test_a_stdio_servers_stderr_goes_to_its_own_file(tmp_path, monkeypatch):
    monkeypatch.setenv("WOLF_HOME", str(tmp_path))
    noisy = "import runpy, sys; print('noisy server starting', file=sys.stderr, flush=True); "
    noisy += f"runpy.run_path({TOOLS_SERVER!r}, run_name='__main__')"
    pool = McpPool({"noisy/1": McpServerConfig(command=sys.executable, args=["-c", noisy])})
    try:
        assert "echo" in {t.name for t in await pool.list_tools("noisy/1")}
    finally:
        await pool.close()
    assert "noisy server starting" in (tmp_path / "logs" / "mcp-noisy_1.log").read_text()
    assert not (tmp_path / "logs" / "mcp-tools.log").exists()


def test_tracing_is_off_without_otel_environment(monkeypatch):
    for name in ("OTEL_EXPORTER_OTLP_ENDPOINT", "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", "OTEL_TRACES_EXPORTER"):
        monkeypatch.delenv(name, raising=False)
    assert not tracing.enabled()
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_ENDPOINT", "http://127.0.0.1:1")
    monkeypatch.setenv("OTEL_SDK_DISABLED", "true")
    assert not tracing.enabled()


def test_off_costs_no_sdk_import():
    code = (
        "import sys, asyncio; from agentwolf.telemetry import tracing; "
        "from agentwolf.worker.bootstrap import create_worker; "
        "assert tracing.interceptors() == [] and tracing.model_instrumentation() is False; "
        "assert not [m for m in sys.modules if m.startswith('opentelemetry.sdk')], 'sdk imported'"
    )
    env = {k: v for k, v in os.environ.items() if not k.startswith("OTEL_")}
    subprocess.run([sys.executable, "-c", code], check=True, env=env, cwd=Path(__file__).parent.parent)
