"""Code mode: the model writes a script; each tool call it makes is the session's own (recorded,
permitted, approved), and a worker SIGKILLed mid-script resumes without repeating a call."""

from __future__ import annotations

import asyncio
import json
import os
import re
import signal
from pathlib import Path
from typing import Any

from pydantic_ai.messages import ModelRequest, ToolCallPart
from temporalio.api.enums.v1 import EventType
from temporalio.testing import ActivityEnvironment

from agentwolf.activities.code import CodeActivities
from agentwolf.config.manifest import Manifest, SessionSettings
from agentwolf.extensions import code_mode
from agentwolf.hosts.host import HostRegistry
from agentwolf.workflows.contracts import ToolSpec
from agentwolf.workflows.script import (
    ScriptLimits,
    ScriptResult,
    ScriptResume,
    ScriptRound,
    ScriptStart,
    function_name,
)
from agentwolf.workflows.types import workflow_id
from tests.conftest import (
    make_manifest,
    openai_manifest,
    record_history,
    tools_server,
    wait_for,
    worker_process,
)
from tests.support.models import Script, sequence, text, tool
from tests.support.openai_server import Reply, ScriptedOpenAI, tool_outputs
from tests.support.polls import idle, in_state, tool_returns


def _manifest(effects: Path | None = None, code_mode: dict[str, Any] | None = None, **agent: Any) -> Manifest:
    servers = {"tools": tools_server(**({"WOLF_SIDE_EFFECTS": str(effects)} if effects else {}))}
    return make_manifest(
        {"capabilities": [{"mcp": "tools"}, {"code_mode": code_mode or {}}], **agent}, mcp_servers=servers
    )


def _script(code: str) -> Script:
    return Script(sequence(tool("run_code", {"code": code}, "rc"), text("done")))


async def _run(wolf, run_worker, script: Script, manifest: Manifest, record: str | None = None):
    """The turn's `run_code` result and the session's events."""
    async with run_worker(local_models={"m": script.model}):
        sid = await wolf.submit("work", "a", manifest)
        await wolf.result(sid)
        events = [e async for _, e in wolf.events(sid, live=False)]
        if record:
            await record_history(wolf.client, workflow_id("default", sid), record)
    (result,) = tool_returns(script.requests[1][-1:])
    return result, events


LOOP = """
import asyncio
total = 0
for i in range(3):
    total = total + await add(a=i, b=10)
pair = await asyncio.gather(add(1, 2), echo(text="hi"))
print("total", total)
{"total": total, "pair": pair}
"""


async def test_a_script_calls_tools_in_a_loop_and_only_its_result_returns(wolf, run_worker):
    script = _script(LOOP)
    result, events = await _run(wolf, run_worker, script, _manifest(), record="code_mode")
    assert result.outcome == "success"
    assert result.content == 'total 33\n-> {"total": 33, "pair": [3, "hi"]}'
    # The model is offered run_code, not the tools; their signatures are in its description.
    assert script.offered[0] == {"run_code"}
    nested = [e for e in events if e.kind == "tool_call_finished" and e.parent == "rc"]
    assert [(e.tool, e.call_id, e.outcome) for e in nested[:3]] == [
        ("add", "rc.1", "success"),
        ("add", "rc.2", "success"),
        ("add", "rc.3", "success"),
    ]
    assert sorted((e.tool, e.text) for e in nested[3:]) == [("add", "3"), ("echo", "hi")]
    # Only run_code reaches the transcript: the script's calls stay out of the context.
    calls = [p for m in script.requests[1] for p in getattr(m, "parts", []) if isinstance(p, ToolCallPart)]
    assert [c.tool_name for c in calls] == ["run_code"]


async def test_a_script_that_raises_is_a_tool_error_with_its_traceback(wolf, run_worker):
    code = "print('before')\nx = await add(a=1, b=1)\nraise ValueError(f'bad value {x}')"
    result, _ = await _run(wolf, run_worker, _script(code), _manifest())
    assert result.outcome == "failed"
    assert result.content.startswith("before\n")
    assert "line 3" in result.content and "ValueError: bad value 2" in result.content


async def test_a_runaway_script_is_stopped_by_its_limits(wolf, run_worker):
    spinning, _ = await _run(
        wolf, run_worker, _script("while True:\n    pass"), _manifest(code_mode={"timeout_s": 1})
    )
    assert spinning.outcome == "failed" and "TimeoutError" in spinning.content
    greedy = "x = 'a'\nwhile True:\n    x = x + x"
    hungry, _ = await _run(wolf, run_worker, _script(greedy), _manifest(code_mode={"memory_mb": 8}))
    assert hungry.outcome == "failed" and "MemoryError" in hungry.content
    chatty = "for i in range(10):\n    await add(a=i, b=0)"
    capped, events = await _run(wolf, run_worker, _script(chatty), _manifest(code_mode={"max_calls": 3}))
    assert capped.outcome == "failed"
    assert "CallLimitError: the script was stopped when it asked for tool call 4" in capped.content
    assert "a script makes at most 3 tool calls" in capped.content
    assert sum(e.kind == "tool_call_finished" and e.parent == "rc" for e in events) == 3


SPREAD_OVER_RUNS = """
import time
for i in range(3):
    began = time.monotonic()
    while time.monotonic() - began < {seconds}:
        pass
    print("x" * {chars})
    await add(a=i, b=0)
"""


async def test_a_scripts_time_and_output_limits_are_for_all_its_runs(wolf, run_worker):
    """Each run between calls stays under `timeout_s` (0.6 of 1 s) or prints under 1 MiB (0.4):
    together they pass the limit, and the script stops. (The sandbox's clock is carried in the
    snapshot; printing was 1 MiB per run.)"""
    slow = SPREAD_OVER_RUNS.format(seconds=0.6, chars=1)
    spread, _ = await _run(wolf, run_worker, _script(slow), _manifest(code_mode={"timeout_s": 1}))
    assert spread.outcome == "failed" and "TimeoutError" in spread.content
    chatty = SPREAD_OVER_RUNS.format(seconds=0, chars=400_000)
    printed, _ = await _run(wolf, run_worker, _script(chatty), _manifest())
    whole = re.search(r"\[cut: \d+ of (\d+) characters shown", printed.content)
    assert printed.outcome == "failed" and whole and int(whole[1]) < (1 << 20) + 1000


async def test_a_tool_the_agent_may_not_use_is_refused_inside_the_script(wolf, run_worker, tmp_path):
    code = """
try:
    await fail(message="x")
except PermissionError as e:
    print("refused:", e)
await record(tag="r")
"""
    manifest = _manifest(
        tmp_path / "effects",
        code_mode={"tools": ["fail", "add"]},
        permissions={"rules": [{"tool": "fail", "action": "deny"}]},
    )
    result, events = await _run(wolf, run_worker, _script(code), manifest)
    assert "refused: denied by policy: fail is not allowed for this agent" in result.content
    assert result.outcome == "failed" and "NameError: name 'record' is not defined" in result.content
    assert not (tmp_path / "effects").exists()
    denied = [e for e in events if e.kind == "tool_call_finished" and e.parent == "rc"]
    assert [(e.tool, e.outcome) for e in denied] == [("fail", "denied")]


async def test_a_confirm_rule_holds_the_script_until_a_person_answers(wolf, run_worker, tmp_path):
    effects = tmp_path / "effects"
    code = "a = await record(tag='one')\nb = await add(a=2, b=3)\nprint(a, b)"
    script = _script(code)
    manifest = _manifest(effects, permissions={"rules": [{"tool": "record", "action": "confirm"}]})
    async with run_worker(local_models={"m": script.model}):
        sid = await wolf.submit("work", "a", manifest)

        async def pending():
            status = await wolf.status(sid)
            return status.pending_approvals if status.state == "waiting_approval" else None

        (waiting,) = await wait_for(pending)
        assert (waiting.call_id, waiting.tool, waiting.args) == ("rc.1", "record", {"tag": "one"})
        assert not effects.exists()  # the script waits: nothing ran yet
        await wolf.approve(sid, "rc.1")
        await wolf.result(sid)
        await record_history(wolf.client, workflow_id("default", sid), "code_mode_approval")
    (result,) = tool_returns(script.requests[1][-1:])
    assert result.content == "recorded one 5\n"
    assert effects.read_text().split() == ["one"]


async def test_a_worker_killed_mid_script_resumes_without_repeating_a_call(env, wolf, task_queue, tmp_path):
    effects = tmp_path / "effects"
    code = """
for i in range(3):
    await record(tag=f"r{i}")
await slow(seconds=3)
for i in range(3, 5):
    await record(tag=f"r{i}")
print("six calls")
"""

    def reply(request: dict[str, Any]) -> Reply:
        done = tool_outputs(request)
        return (
            Reply(text="finished: " + done[-1]) if done else Reply(tool_calls=[("run_code", {"code": code})])
        )

    with ScriptedOpenAI(reply) as server:
        manifest = openai_manifest(
            server.base_url, mcp_servers={"tools": tools_server(WOLF_SIDE_EFFECTS=str(effects))}
        )
        data = manifest.model_dump()
        data["agents"]["a"]["capabilities"].append({"code_mode": {}})
        manifest = Manifest.model_validate(data)
        first = worker_process(env, task_queue)
        second = None
        try:
            sid = await wolf.submit("do the work", "a", manifest)
            async for _, event in wolf.events(sid):
                if event.kind == "tool_call_started" and event.tool == "slow":
                    break
            assert effects.read_text().split() == ["r0", "r1", "r2"]
            first.send_signal(signal.SIGKILL)
            first.wait()
            second = worker_process(env, task_queue)
            result = await wolf.result(sid)
            transcript = await wolf.transcript(sid)
        finally:
            for proc in (first, second):
                if proc is not None and proc.poll() is None:
                    proc.terminate()
                    proc.wait(10)
    assert result.output == "finished: six calls\n"
    # The three calls before the crash ran once: the script resumed from its snapshot.
    assert effects.read_text().split() == ["r0", "r1", "r2", "r3", "r4"]
    (ret,) = tool_returns(transcript)
    assert ret.tool_name == "run_code" and ret.outcome == "success"
    assert sum(isinstance(m, ModelRequest) for m in transcript) == 2
    assert len(server.requests) == 2


async def test_a_script_waiting_for_approval_never_continues_as_new(wolf, run_worker, tmp_path):
    """A long approval wait continues as new, but not while a script waits: its next run would start
    the script again."""
    effects = tmp_path / "effects"
    code = "total = await add(a=1, b=2)\nprint(await record(tag='one'), total)"
    script = _script(code)
    manifest = _manifest(effects, permissions={"rules": [{"tool": "record", "action": "confirm"}]})
    manifest = manifest.model_copy(
        update={
            "host": manifest.host.model_copy(update={"sessions": SessionSettings(continue_as_new_bytes=1)})
        }
    )
    async with run_worker(local_models={"m": script.model}):
        sid = await wolf.submit("work", "a", manifest)
        await wait_for(lambda: in_state(wolf, sid, "waiting_approval"))
        for i in range(40):  # inputs that grow a waiting run's history
            await wolf.steer(sid, f"hint {i}")
        status = await wolf.status(sid)
        assert status.state == "waiting_approval" and status.counters.continued_as_new == 0
        await wolf.approve(sid, "rc.2")
        await wolf.result(sid)
        events = [e async for _, e in wolf.events(sid, live=False)]
    (result,) = tool_returns(script.requests[1][-1:])
    assert result.content == "recorded one 3\n"
    assert effects.read_text().split() == ["one"]
    assert [e.call_id for e in events if e.kind == "tool_call_started" and e.tool == "add"] == ["rc.1"]


def test_the_sandbox_has_no_files_environment_or_network():
    """What a script cannot reach, run as the `wolf.code_start` activity runs it (no worker needed)."""
    limits, sandboxes = ScriptLimits(memory_mb=64, timeout_s=10), code_mode.Sandboxes()
    for code, error in (
        ("open('/etc/passwd').read()", "PermissionError: Permission denied: '/etc/passwd'"),
        ("import os\nos.environ.get('HOME')", "RuntimeError: 'os.environ' is not supported"),
        ("import socket", "ModuleNotFoundError: No module named 'socket'"),
        ("import subprocess", "ModuleNotFoundError: No module named 'subprocess'"),
        ("x = lookup(id=1)\nx['a']", "TypeError: 'coroutine' object is not subscriptable"),  # no await
    ):
        step = code_mode.start(ScriptStart(code=code, functions={"lookup": ["id"]}, limits=limits), sandboxes)
        assert step.error is not None and error in step.error, (code, step.error)
        assert step.calls == [] and step.snapshot is None
    # A fresh session each run: what one script leaves behind, the next one never sees.
    first = code_mode.start(ScriptStart(code="secret = 'a'\nsecret", functions={}, limits=limits), sandboxes)
    second = code_mode.start(ScriptStart(code="secret", functions={}, limits=limits), sandboxes)
    sandboxes.close()
    assert first.output == "a" and second.error and "NameError: name 'secret' is not defined" in second.error


async def test_an_interrupt_stops_a_script_mid_call(wolf, run_worker):
    """The script's call in flight is cancelled and `run_code` closes as interrupted."""
    code = "await add(a=1, b=2)\nawait slow(seconds=600)\nawait add(a=3, b=4)"
    script = Script(lambda s: tool("run_code", {"code": code}, "rc") if s.calls == 1 else text("ok"))
    async with run_worker(local_models={"m": script.model}):
        sid = await wolf.start_session("a", _manifest())
        await wolf.prompt(sid, "go")
        async for _, event in wolf.events(sid, live=False):
            if event.kind == "tool_call_started" and event.tool == "slow":
                break
        await wolf.interrupt(sid, "stop")
        await wait_for(lambda: idle(wolf, sid), timeout=120)
        status = await wolf.status(sid)
        transcript = await wolf.transcript(sid)
        await wolf.close(sid)
        await wolf.result(sid)
        events = [e async for _, e in wolf.events(sid, live=False) if e.kind == "tool_call_finished"]
    assert status.last_outcome == "interrupted"
    closing = transcript[-1]
    assert isinstance(closing, ModelRequest)
    assert [(p.tool_name, p.outcome) for p in closing.parts] == [("run_code", "interrupted")]
    assert [e.call_id for e in events if e.tool == "add"] == ["rc.1"]  # the script went no further


def test_a_script_call_is_drawn_under_its_run_code():
    from datetime import UTC, datetime

    from agentwolf.cli.live_view import event_line
    from agentwolf.workflows.types import Event

    at = datetime.now(UTC)
    outer = Event(kind="tool_call_started", at=at, tool="run_code", call_id="rc", args={"code": "..."})
    inner = Event(kind="tool_call_started", at=at, tool="add", call_id="rc.1", args={"a": 1}, parent="rc")
    assert str(event_line(outer)).startswith("  -> run_code(")
    assert str(event_line(inner)) == '    -> add({"a": 1})'


async def test_a_scripts_concurrent_calls_run_within_the_agents_parallel_limit(wolf, run_worker):
    code = "import asyncio\nsum(await asyncio.gather(*[add(a=i, b=0) for i in range(6)]))"
    manifest = _manifest(limits={"max_parallel_tools": 2})
    result, events = await _run(wolf, run_worker, _script(code), manifest)
    assert result.content == "-> 15"
    running, most = 0, 0
    for e in events:
        if e.parent == "rc":
            running += 1 if e.kind == "tool_call_started" else -1 if e.kind == "tool_call_finished" else 0
            most = max(most, running)
    assert most == 2


def test_signatures_are_python_whatever_the_tool_names():
    spec = ToolSpec(
        name="get-weather",
        server="s",
        tool="get-weather",
        description="The weather.",
        parameters={
            "type": "object",
            "properties": {
                "units": {"enum": ["c", "f"], "default": "c"},
                "city": {"type": "string"},
                "days": {"type": ["integer", "null"]},
                "tags": {"type": "array", "items": {"type": "string"}},
            },
            "required": ["city", "tags"],
        },
    )
    assert code_mode.signature(spec) == (
        "async def get_weather(city: str, tags: list[str], units: Literal['c', 'f'] = 'c', "
        'days: int | None = None) -> Any:\n    """The weather."""'
    )
    assert function_name(spec.model_copy(update={"name": "class"})) == "class_"


PAST_THE_LIMIT = """
urls = [f"https://example.com/page/{i}" for i in range(400)]
found = []
for u in urls:
    try:
        found.append(await echo(text=u))
    except Exception as e:
        found.append(str(e))
print(len(found))
"""

REFUSED_IN_A_LOOP = """
refused = 0
for i in range(1000):
    try:
        await fail(message="x")
    except PermissionError:
        refused = refused + 1
print(refused)
"""


async def _script_then_next_prompt(
    wolf, run_worker, manifest: Manifest, code: str, record: str | None = None
):
    """The first turn runs `code`; the session then answers a second prompt (it is not terminated).
    Returns `run_code`'s result, the session's events and its history."""
    script = Script(lambda s: tool("run_code", {"code": code}, "rc") if s.calls == 1 else text("ok"))
    async with run_worker(local_models={"m": script.model}):
        sid = await wolf.start_session("a", manifest)
        await wolf.prompt(sid, "go")
        await wait_for(lambda: idle(wolf, sid, turns=1), timeout=120)
        await wolf.prompt(sid, "and now?")
        await wait_for(lambda: idle(wolf, sid, turns=2), timeout=120)
        await wolf.close(sid)
        await wolf.result(sid)
        events = [e async for _, e in wolf.events(sid, live=False)]
        history = await wolf.client.get_workflow_handle(workflow_id("default", sid)).fetch_history()
        if record:
            await record_history(wolf.client, workflow_id("default", sid), record)
    (result,) = tool_returns(script.requests[1][-1:])
    assert len(script.requests) == 3  # the second prompt was answered
    return result, events, history


def _most_markers_in_one_task(history) -> int:
    """The most markers (local activity results, each with the script's snapshot) one workflow task
    completion carried: the server refuses a completion past 4 MiB and terminates the session."""
    most, markers = 0, 0
    for event in history.events:
        if event.event_type == EventType.EVENT_TYPE_MARKER_RECORDED:
            markers += 1
        elif event.event_type == EventType.EVENT_TYPE_WORKFLOW_TASK_COMPLETED:
            markers = 0
        most = max(most, markers)
    return most


async def test_a_script_looping_past_max_calls_ends_and_the_session_lives(wolf, run_worker):
    """A call past `max_calls` ends the script with one error the model sees: no exception the
    script can catch and call again (400 caught refusals chained local activities in one workflow
    task until the server terminated the session)."""
    result, events, _ = await _script_then_next_prompt(
        wolf, run_worker, _manifest(), PAST_THE_LIMIT, record="code_mode_call_limit"
    )
    assert result.outcome == "failed"
    assert "a script makes at most 50 tool calls" in result.content
    assert sum(e.kind == "tool_call_finished" and e.parent == "rc" for e in events) == 50


async def test_a_refused_tool_called_in_a_loop_never_piles_up_in_one_workflow_task(wolf, run_worker):
    """Refusals are answered in the workflow, with no activity between the script's resumes: the
    resumes still end their workflow task every few, and the refusals count toward `max_calls`."""
    manifest = _manifest(
        code_mode={"tools": ["fail"], "max_calls": 300},
        permissions={"rules": [{"tool": "fail", "action": "deny"}]},
    )
    result, events, history = await _script_then_next_prompt(wolf, run_worker, manifest, REFUSED_IN_A_LOOP)
    assert result.outcome == "failed" and "a script makes at most 300 tool calls" in result.content
    refused = [e for e in events if e.kind == "tool_call_finished" and e.parent == "rc"]
    assert len(refused) == 300 and {e.outcome for e in refused} == {"denied"}
    assert _most_markers_in_one_task(history) <= 16


async def test_scripts_waiting_for_a_sandbox_leave_the_default_executor_free():
    """Every sandbox spins and more scripts wait for one (more than the event loop's default executor
    has threads): the worker's DNS lookups and other `to_thread` work still run meanwhile."""
    activities = CodeActivities(HostRegistry())
    spin = ScriptStart(
        code="while True:\n    pass", functions={}, limits=ScriptLimits(memory_mb=64, timeout_s=3)
    )
    default_threads = min(32, (os.cpu_count() or 1) + 4)
    env = ActivityEnvironment()
    spinning = [asyncio.create_task(env.run(activities.code_start, spin)) for _ in range(default_threads + 2)]
    await asyncio.sleep(0.2)  # they start
    loop = asyncio.get_running_loop()
    await asyncio.gather(loop.getaddrinfo("localhost", 80), asyncio.to_thread(sum, [1, 2]))
    assert not any(t.done() for t in spinning)  # answered while every script still spun or waited
    steps = await asyncio.gather(*spinning)
    activities.sandboxes.close()
    assert all(s.error and ("TimeoutError" in s.error or "sandbox busy" in s.error) for s in steps)


async def test_a_script_that_waits_too_long_for_a_sandbox_is_told_it_is_busy():
    sandboxes = code_mode.Sandboxes(processes=1, wait_s=0.2)
    limits = ScriptLimits(memory_mb=64, timeout_s=5)
    spinning = asyncio.create_task(
        sandboxes.run(code_mode.start, ScriptStart(code="while True:\n    pass", functions={}, limits=limits))
    )
    await asyncio.sleep(0)  # it takes the only sandbox
    waited = await sandboxes.run(code_mode.start, ScriptStart(code="1", functions={}, limits=limits))
    assert not spinning.done()
    assert waited.error is not None and waited.error.startswith(
        "sandbox busy: this worker's 1 code-mode sandboxes"
    )
    assert "TimeoutError" in ((await spinning).error or "")
    sandboxes.close()


FIFTY_CALLS = """
found = []
for i in range(50):
    found.append(await echo(text=f"https://example.com/page/{i}"))
print(len(found))
"""


def _sandbox_steps(history) -> list[dict[str, Any]]:
    """What each sandbox run (`wolf.code_start`/`wolf.code_resume`) recorded in its marker."""
    steps = []
    for event in history.events:
        if event.event_type != EventType.EVENT_TYPE_MARKER_RECORDED:
            continue
        details = event.marker_recorded_event_attributes.details
        if "result" not in details or "data" not in details:
            continue
        kind = json.loads(details["data"].payloads[0].data)["activity_type"]
        if kind in ("wolf.code_start", "wolf.code_resume"):
            steps.append(json.loads(details["result"].payloads[0].data))
    return steps


async def test_a_scripts_snapshots_stay_on_its_worker_and_history_records_their_digests(wolf, run_worker):
    """The interpreter's state was in the marker of every sandbox run (50 calls: 51 snapshots in
    history); it stays on the worker, and the markers carry its digest."""
    result, _, history = await _script_then_next_prompt(
        wolf, run_worker, _manifest(), FIFTY_CALLS, record="code_mode_kept"
    )
    assert result.outcome == "success" and result.content.strip() == "50"
    steps = _sandbox_steps(history)
    assert len(steps) == 51
    assert all(s.get("snapshot") is None and s.get("digest") for s in steps[:-1])


def test_a_worker_without_the_kept_snapshot_runs_the_script_again_on_its_recorded_calls():
    """Each resume on a worker that never saw the script (as after a restart) rebuilds its state from
    the recorded rounds and calls no tool again; what it prints is only what follows the last call.
    Rounds that do not match what the script asks for end it with an error, not a call."""
    functions = {"add": ["a", "b"]}
    limits = ScriptLimits(memory_mb=64, timeout_s=10)
    code = "total = 0\nfor i in range(3):\n    print('round', i)\n    total = total + await add(i, 10)\ntotal"
    step = code_mode.start(
        ScriptStart(code=code, functions=functions, limits=limits, keep="s"), code_mode.Sandboxes(1)
    )
    rounds, printed = [], [step.stdout]
    while step.calls:
        assert step.snapshot is None and step.digest
        results = [
            ScriptResult(id=c.id, content=str(c.arguments["a"] + c.arguments["b"])) for c in step.calls
        ]
        rounds.append(ScriptRound(calls=step.calls, results=results))
        resume = ScriptResume(
            functions=functions, limits=limits, scope="s", digest=step.digest, code=code, rounds=rounds
        )
        step = code_mode.resume(resume, code_mode.Sandboxes(1))  # a cold worker every time
        printed.append(step.stdout)
    assert step.error is None and step.output == "33"
    assert "".join(printed) == "round 0\nround 1\nround 2\n"
    other = [
        ScriptRound(
            calls=[c.model_copy(update={"arguments": {"a": 5, "b": 5}}) for c in rounds[0].calls],
            results=rounds[0].results,
        )
    ]
    resume = ScriptResume(
        functions=functions, limits=limits, scope="s", digest="gone", code=code, rounds=other
    )
    diverged = code_mode.resume(resume, code_mode.Sandboxes(1))
    assert diverged.error == code_mode.REPLAY_DIVERGED and not diverged.calls
