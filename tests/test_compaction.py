"""Context compaction on a real dev server and worker, against the scripted OpenAI server in window
mode (a request past the window is refused 400 `context_length_exceeded`, as OpenAI does)."""

from __future__ import annotations

import json
import re
import signal
import threading
from datetime import UTC, datetime
from typing import Any

from agentwolf.activities.overflow import context_overflow
from agentwolf.activities.window import known_window
from agentwolf.cli.live_view import event_line, json_line
from agentwolf.config.manifest import Manifest
from agentwolf.workflows.compaction import FOLD_TO, SUMMARY_INSTRUCTIONS
from agentwolf.workflows.types import Event, workflow_id
from tests.conftest import record_history, tools_server, wait_for, worker_process
from tests.support.models import user_texts
from tests.support.openai_server import Reply, ScriptedOpenAI, tool_outputs
from tests.support.polls import idle, tool_returns
from tests.support.processes import end
from tests.test_cli import _wolf

INSTRUCTIONS = "You are the compaction test agent. Always answer in English."
FACT = re.compile(r"fact-\d+")


def manifest(
    base_url: str,
    window: int | None,
    model: str = "openai:gpt-4o-mini",
    sessions: dict[str, Any] | None = None,
    **limits: Any,
) -> Manifest:
    models: dict[str, Any] = {"providers": {"openai": {"api_key": "k", "base_url": base_url}}}
    if window is not None:
        models["context_windows"] = {model: window}
    return Manifest.model_validate(
        {
            "host": {"models": models, "mcp_servers": {"tools": tools_server()}, "sessions": sessions or {}},
            "agents": {
                "a": {
                    "model": model,
                    "instructions": INSTRUCTIONS,
                    "capabilities": [{"mcp": "tools"}],
                    "stream": False,
                    "limits": limits,
                }
            },
        }
    )


def is_summary(request: dict[str, Any]) -> bool:
    return SUMMARY_INSTRUCTIONS[:40] in (request.get("instructions") or "")


def reply(request: dict[str, Any], size: int = 1800) -> Reply:
    """A turn: a tool call with a long result, then an answer. A summary: the facts it read."""
    if is_summary(request):
        return Reply(
            text="Summary. Facts found: " + ", ".join(sorted(set(FACT.findall(json.dumps(request)))))
        )
    last = request["input"][-1]
    if last.get("type") == "function_call_output":
        return Reply(text="noted")
    prompt = json.dumps(last)
    if "recall" in prompt:  # read back the first result, as its stub says
        stub = next(o for o in tool_outputs(request) if "put aside" in o)
        args = dict(re.findall(r"(\w+)=('[^']*'|\d+)", stub.split("recall(", 1)[1]))
        return Reply(
            tool_calls=[
                ("recall", {k: v.strip("'") if v.startswith("'") else int(v) for k, v in args.items()})
            ]
        )
    return Reply(tool_calls=[("big", {"size": size})])


def requests_of(server: ScriptedOpenAI) -> list[dict[str, Any]]:
    return [r for r in server.requests if not is_summary(r)]


async def run_turns(wolf: Any, sid: str, start: int, count: int) -> None:
    for i in range(start, start + count):
        await wolf.prompt(sid, f"turn {i}: remember fact-{i}")
        await wait_for(lambda n=i + 1: idle(wolf, sid, n), timeout=120)


async def closed_runs(client: Any, wid: str, count: int) -> list[str] | None:
    """The run ids of the session's runs that continued as new, oldest first, once there are `count`."""
    runs = [w async for w in client.list_workflows(f"WorkflowId = '{wid}'") if w.close_time is not None]
    return [w.run_id for w in sorted(runs, key=lambda w: w.close_time)] if len(runs) >= count else None


async def activities_of(client: Any, wid: str, run_id: str | None = None) -> list[str]:
    """The activity types a run scheduled, in order."""
    history = await client.get_workflow_handle(wid, run_id=run_id).fetch_history()
    return [
        e.activity_task_scheduled_event_attributes.activity_type.name
        for e in history.events
        if e.HasField("activity_task_scheduled_event_attributes")
    ]


async def events_of(wolf: Any, sid: str) -> list[Any]:
    await wolf.close(sid)
    return [e async for _, e in wolf.events(sid, live=False)]


async def test_a_long_session_compacts_in_both_tiers_and_loses_nothing(wolf, run_worker, client):
    with ScriptedOpenAI(reply, window=3000) as server:
        async with run_worker():
            sid = await wolf.start_session("a", manifest(server.base_url, 3000))
            await wolf.pin(sid, "The user's name is Ada; address her by name.")
            await run_turns(wolf, sid, 0, 14)
            status = await wolf.status(sid)
            transcript = await wolf.transcript(sid)
            await record_history(client, workflow_id("default", sid), "context_compaction")
            events = await events_of(wolf, sid)
    compacted = [e for e in events if e.kind == "context_compacted"]
    finished = [e for e in events if e.kind == "turn_finished"]
    assert [e.outcome for e in finished] == ["completed"] * 14
    assert server.refused == 0  # compacted before any request overflowed
    assert {e.tier for e in compacted} == {1, 2}
    assert all(e.after_tokens < e.before_tokens for e in compacted)
    assert status.compactions == len(compacted) and status.context_window == 3000
    assert status.context_tokens is not None and status.context_tokens < 3000
    # Instructions and the pinned note are in every request; every request fits the window.
    assert all(INSTRUCTIONS in r["instructions"] and "Ada" in r["instructions"] for r in requests_of(server))
    assert max(server.tokens) <= 3000
    # The transcript is whole: every prompt and every result, as they were.
    prompts = user_texts(transcript)
    assert prompts == [f"turn {i}: remember fact-{i}" for i in range(14)]
    assert [r.content for r in tool_returns(transcript)] == ["x" * 1800] * 14
    # Every fact reached the last request, verbatim or through the summary.
    last = json.dumps(requests_of(server)[-1])
    assert set(FACT.findall(last)) >= {f"fact-{i}" for i in range(14)}


async def test_the_view_rides_continue_as_new_and_idle_points_compact(wolf, run_worker, client):
    """Every idle point continues as new: compaction happens there, before the snapshot, and the
    next run starts from the compacted view (it does not compact the same turns again)."""
    with ScriptedOpenAI(reply, window=3000) as server:
        async with run_worker():
            config = manifest(server.base_url, 3000, sessions={"continue_as_new_bytes": 1})
            sid = await wolf.start_session("a", config)
            wid = workflow_id("default", sid)
            await run_turns(wolf, sid, 0, 8)
            status = await wolf.status(sid)
            # The run that summarised at its idle point, before its snapshot: it carried a view in too.
            runs = await wait_for(lambda: closed_runs(client, wid, 8), timeout=60)
            summarising = [r for r in runs if "wolf.compact_summary" in await activities_of(client, wid, r)]
            assert len(summarising) == 1
            await record_history(client, wid, "context_compaction_continue_as_new", run_id=summarising[0])
            events = await events_of(wolf, sid)
    compacted = [e for e in events if e.kind == "context_compacted"]
    assert [e.outcome for e in events if e.kind == "turn_finished"] == ["completed"] * 8
    assert status.counters.continued_as_new >= 7 and status.compactions == len(compacted) >= 1
    assert server.refused == 0 and max(server.tokens) <= 3000
    # What one run compacted stays compacted in the requests of the runs after it.
    compact = [
        "put aside" in json.dumps(r) or "context-summary" in json.dumps(r) for r in requests_of(server)
    ]
    assert all(compact[compact.index(True) :])


async def test_older_turns_fold_into_one_note_past_the_message_bound(wolf, run_worker, client):
    """A window far from full, but more than FOLD_AT messages: older turns reach the model as one
    note (every prompt, call and result in it, whole), the current turn as messages; no summary."""
    with ScriptedOpenAI(lambda r: reply(r, size=500), window=100_000) as server:
        async with run_worker():
            sid = await wolf.start_session("a", manifest(server.base_url, 100_000))
            await run_turns(wolf, sid, 0, 17)
            await record_history(client, workflow_id("default", sid), "context_folding")
            events = await events_of(wolf, sid)
    compacted = [e for e in events if e.kind == "context_compacted"]
    assert [(e.tier, "folded" in (e.text or "")) for e in compacted] == [(1, True)]
    assert [e.outcome for e in events if e.kind == "turn_finished"] == ["completed"] * 17
    before, last = requests_of(server)[-3], requests_of(server)[-1]  # turn 15's last, turn 16's last
    assert len(before["input"]) == 4 * 16 - 1 and len(last["input"]) <= FOLD_TO
    note, rest = json.dumps(last["input"][0]), json.dumps(last["input"][1:])
    assert "earlier-turns" in note and "earlier-turns" not in rest
    assert note.count("x" * 500) + rest.count("x" * 500) == 17  # every result, whole
    assert set(FACT.findall(json.dumps(last))) == {f"fact-{i}" for i in range(17)}
    assert not any(is_summary(r) for r in server.requests) and server.refused == 0


def user_messages(request: dict[str, Any]) -> list[str]:
    return [json.dumps(item["content"]) for item in request["input"] if item.get("role") == "user"]


async def test_after_a_rewind_or_fork_of_a_folded_session_the_next_prompt_is_sent_as_a_prompt(
    wolf, run_worker, client
):
    """A cut before the fold's end (rewind, fork) ends the fold there: the next prompt reaches the
    model as its last user message, with its step's call and result as messages after it, not as
    lines of the "earlier turns, not a new request" note."""

    def sent_as_prompt(prompt: str) -> None:
        first, last = [r for r in requests_of(server) if prompt in json.dumps(r)][:2]
        assert user_messages(first)[-1] == json.dumps(prompt) and first["input"][-1]["role"] == "user"
        assert user_messages(last)[-1] == json.dumps(prompt)
        assert [i.get("type") for i in last["input"][-2:]] == ["function_call", "function_call_output"]

    with ScriptedOpenAI(lambda r: reply(r, size=500), window=100_000) as server:
        async with run_worker():
            sid = await wolf.start_session("a", manifest(server.base_url, 100_000))
            await run_turns(wolf, sid, 0, 25)  # 100 messages: older turns folded
            assert "earlier-turns" in json.dumps(requests_of(server)[-1]["input"][0])

            fork = await wolf.fork(sid, at="10")
            await wolf.prompt(fork.session_id, "after the fork: remember fact-100")
            await wait_for(lambda: idle(wolf, fork.session_id, 11), timeout=120)
            sent_as_prompt("after the fork: remember fact-100")

            await wolf.rewind(sid, "10")
            await wolf.prompt(sid, "after the rewind: remember fact-101")
            await wait_for(lambda: idle(wolf, sid, 26), timeout=120)
            sent_as_prompt("after the rewind: remember fact-101")
            await record_history(client, workflow_id("default", sid), "rewind_folded")
    assert not any(is_summary(r) for r in server.requests) and server.refused == 0


async def test_a_rewind_measures_the_next_turn_as_what_it_sends(wolf, run_worker):
    """Each message's size is measured once (the transcript only grows, but for a rewind): after a
    rewind past a big result, the next turn's messages take its places, and are measured anew."""

    def replies(request: dict[str, Any]) -> Reply:
        big = "read the big file" in json.dumps(request["input"][-1])
        return reply(request, size=40_000 if big else 10)

    with ScriptedOpenAI(replies, window=1_000_000) as server:
        async with run_worker():
            sid = await wolf.start_session("a", manifest(server.base_url, 1_000_000))
            await run_turns(wolf, sid, 0, 1)
            small = (await wolf.status(sid)).context_tokens
            await wolf.prompt(sid, "turn 1: read the big file")
            await wait_for(lambda: idle(wolf, sid, 2), timeout=120)
            big = (await wolf.status(sid)).context_tokens
            await wolf.rewind(sid, "1")
            await run_turns(wolf, sid, 2, 1)
            after = (await wolf.status(sid)).context_tokens
    assert small is not None and big is not None and after is not None
    assert big > small + 10_000  # the big result: 40 000 characters
    assert after < small + 1_000, (small, big, after)  # a small turn, not the set-aside big one


async def test_wolf_pin_compact_and_status_on_the_command_line(wolf, run_worker, client):
    address = client.service_client.config.target_host
    with ScriptedOpenAI(reply) as server:
        async with run_worker():
            sid = await wolf.start_session("a", manifest(server.base_url, 100_000))
            await run_turns(wolf, sid, 0, 3)
            pinned = await _wolf(address, "pin", sid, "the answer is 42")
            compacted = await _wolf(address, "compact", sid)
            await wait_for(lambda: wolf_status_compactions(wolf, sid), timeout=60)
            status = await _wolf(address, "status", sid)
            await run_turns(wolf, sid, 3, 1)
            events = await events_of(wolf, sid)
    assert pinned.returncode == compacted.returncode == status.returncode == 0, status.stderr
    assert "/100,000 (" in status.stdout and "compactions=1" in status.stdout
    assert [e.tier for e in events if e.kind == "context_compacted"] == [1]  # asked, between turns
    last = server.requests[-1]
    assert "the answer is 42" in last["instructions"] and INSTRUCTIONS in last["instructions"]
    assert sum("put aside" in o for o in tool_outputs(last)) == 3  # the three earlier results
    assert "recall" in {t["name"] for t in last["tools"]}


async def wolf_status_compactions(wolf: Any, sid: str) -> bool:
    return (await wolf.status(sid)).compactions >= 1


async def test_a_refused_request_compacts_and_the_step_is_asked_again(wolf, run_worker, client):
    """The model's window is unknown (genai-prices does not know it, the manifest names none): the
    provider's 400 tells it, the session compacts and asks again within the same step."""
    with ScriptedOpenAI(reply, window=3000) as server:
        async with run_worker():
            sid = await wolf.start_session(
                "a", manifest(server.base_url, None, model="openai:scripted-model")
            )
            await run_turns(wolf, sid, 0, 8)
            status = await wolf.status(sid)
            await record_history(client, workflow_id("default", sid), "context_compaction_reactive")
            events = await events_of(wolf, sid)
    finished = [e for e in events if e.kind == "turn_finished"]
    assert [e.outcome for e in finished] == ["completed"] * 8
    assert server.refused == 1  # once learnt, the window is kept: no second refusal
    assert status.context_window == 3000  # as the provider named it
    assert any(e.kind == "context_compacted" for e in events)


async def test_compaction_off_sends_the_whole_transcript_and_fails_past_the_window(wolf, run_worker):
    with ScriptedOpenAI(reply, window=3000) as server:
        async with run_worker():
            sid = await wolf.start_session("a", manifest(server.base_url, 3000, compaction="off"))
            for i in range(6):
                await wolf.prompt(sid, f"turn {i}: remember fact-{i}")
                await wait_for(lambda n=i + 1: idle(wolf, sid, n), timeout=120)
            events = await events_of(wolf, sid)
    outcomes = [e.outcome for e in events if e.kind == "turn_finished"]
    assert "failed" in outcomes and not any(e.kind == "context_compacted" for e in events)
    error = next(e.text for e in events if e.kind == "error")
    assert "context length" in error


async def test_recall_reads_a_stubbed_result_back_whole(wolf, run_worker):
    with ScriptedOpenAI(reply, window=3000) as server:
        async with run_worker():
            sid = await wolf.start_session("a", manifest(server.base_url, 3000))
            await run_turns(wolf, sid, 0, 5)
            await wolf.prompt(sid, "turn 5: recall the first result")
            await wait_for(lambda: idle(wolf, sid, 6), timeout=120)
            transcript = await wolf.transcript(sid)
    recalled = tool_returns(transcript)[-1]
    assert recalled.tool_name == "recall"
    assert recalled.content == "[characters 0-1800 of 1800; that is the end]\n" + "x" * 1800


async def test_a_worker_killed_mid_summary_leaves_one_summary(env, wolf, client, task_queue):
    """Results too short to stub: compaction goes to tier 2 at once. The first summary request
    hangs; its worker is SIGKILLed; another worker's retry writes the summary, recorded once."""
    asked = threading.Event()

    def hanging(request: dict[str, Any]) -> Reply:
        if is_summary(request) and not asked.is_set():
            asked.set()
            return Reply(text="never read", delay=30)
        return reply(request, size=300)

    with ScriptedOpenAI(hanging, window=1400) as server:
        first, second = worker_process(env, task_queue), None
        try:
            sid = await wolf.start_session("a", manifest(server.base_url, 1400))
            turns = 0
            while not asked.is_set():
                await wolf.prompt(sid, f"turn {turns}: remember fact-{turns}")
                turns += 1
                await wait_for(lambda n=turns: asked.is_set() or idle(wolf, sid, n), timeout=120)
            first.send_signal(signal.SIGKILL)
            first.wait()
            second = worker_process(env, task_queue)
            await wait_for(lambda: idle(wolf, sid, turns), timeout=120)
            history = await client.get_workflow_handle(workflow_id("default", sid)).fetch_history()
            events = await events_of(wolf, sid)
        finally:
            for proc in (first, second):
                if proc is not None:
                    end(proc)
    completed = [e for e in history.events if e.HasField("activity_task_completed_event_attributes")]
    scheduled = {
        e.event_id: e.activity_task_scheduled_event_attributes.activity_type.name
        for e in history.events
        if e.HasField("activity_task_scheduled_event_attributes")
    }
    summaries = [
        e
        for e in completed
        if scheduled[e.activity_task_completed_event_attributes.scheduled_event_id] == "wolf.compact_summary"
    ]
    assert len(summaries) == 1
    assert sum(is_summary(r) for r in server.requests) == 2  # the killed attempt, then the retry
    assert [e.tier for e in events if e.kind == "context_compacted"] == [2]
    assert [e.outcome for e in events if e.kind == "turn_finished"] == ["completed"] * turns


def test_context_length_errors_are_told_from_other_400s():
    openai = {
        "error": {
            "message": "This model's maximum context length is 8192 tokens.",
            "code": "context_length_exceeded",
        }
    }
    anthropic = {
        "type": "error",
        "error": {
            "type": "invalid_request_error",
            "message": "prompt is too long: 210000 tokens > 200000 maximum",
        },
    }
    gemini = {
        "error": {
            "message": "The input token count (1200000) exceeds the maximum number of tokens allowed "
            "(1048576)."
        }
    }
    responses = {
        "error": {
            "message": "Your input exceeds the context window of this model.",
            "code": "context_length_exceeded",
        }
    }
    assert context_overflow(openai) is not None and context_overflow(openai).window == 8192
    assert context_overflow(anthropic).window == 200000
    assert context_overflow(gemini).window == 1048576
    assert context_overflow(responses).window is None
    assert (
        context_overflow({"error": {"message": "Invalid value for 'temperature'", "code": "invalid_value"}})
        is None
    )
    assert context_overflow(None) is None


def test_windows_come_from_genai_prices_for_known_models_only():
    assert known_window("openai:gpt-4o-mini") == known_window("openai-chat:gpt-4o-mini") == 128_000
    assert known_window("local:m") is None and known_window("openai:scripted-model") is None


def test_follow_shows_a_compaction_as_one_line():
    event = Event(
        kind="context_compacted",
        at=datetime.now(UTC),
        text="context compacted (tier 1): about 25900 -> 13100 tokens of 32768",
        tier=1,
        before_tokens=25900,
        after_tokens=13100,
    )
    line = event_line(event)
    assert (
        line is not None
        and line.plain == "  context compacted (tier 1): about 25900 -> 13100 tokens of 32768"
    )
    record = json.loads(json_line(7, event))
    assert record["tier"] == 1 and record["before_tokens"] == 25900 and record["after_tokens"] == 13100
