"""Property-based hostile input at the tool boundary, on the real dev server and real MCP servers:
whatever arguments a model sends (deep, huge, unicode, not an object, not JSON) reach the MCP echo
tool or come back as a clear tool error; whatever an MCP server answers (malformed, huge, slow,
never, an error, a crash) becomes a clear tool error or a result; and the session never gets stuck.

Each example is one turn of one long-lived session. Hypothesis runs in a thread and hands each turn
to the test's event loop; examples are few and derandomized so CI runs the same cases every time.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import sys
from collections import Counter
from collections.abc import Awaitable, Callable
from typing import Any

import hypothesis
import pydantic_core
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from pydantic_ai.messages import ModelRequest, ModelResponse, ToolCallPart, ToolReturnPart
from temporalio.api.enums.v1 import EventType
from temporalio.client import WorkflowQueryFailedError
from temporalio.service import RPCError

from agentwolf.config.manifest import Limits
from agentwolf.workflows.types import workflow_id
from tests.conftest import SUPPORT, make_manifest, openai_manifest, tools_server, worker_process
from tests.support.models import Script, text, user_texts
from tests.support.openai_server import Reply, ScriptedOpenAI, tool_outputs
from tests.support.processes import end

HOSTILE_SERVER = str(SUPPORT / "hostile_server.py")
TURN_TIMEOUT = 90.0
TOOL_OUTPUT_CHARS = Limits().tool_output_chars


def _run_examples(
    loop: asyncio.AbstractEventLoop,
    strategy,
    check: Callable[[Any], Awaitable[None]],
    examples: int,
    explicit: tuple[Any, ...] = (),
):
    """A hypothesis test, for a worker thread, that runs `check(example)` on `loop` (the test's):
    the `explicit` examples first, then `examples` generated ones."""

    @settings(
        max_examples=examples,
        deadline=None,
        derandomize=True,
        database=None,
        suppress_health_check=list(HealthCheck),
    )
    @given(strategy)
    def prop(example: Any) -> None:
        asyncio.run_coroutine_threadsafe(check(example), loop).result(timeout=TURN_TIMEOUT * 2)

    for value in reversed(explicit):
        prop = hypothesis.example(value)(prop)
    return prop


class _Session:
    """One interactive session; `turn()` prompts `case N` and waits until the session is idle again."""

    def __init__(self, wolf, sid: str) -> None:
        self.wolf, self.sid, self.turns = wolf, sid, 0
        self.stuck: str | None = None

    async def turn(self) -> int:
        if self.stuck:  # later examples cannot tell anything more
            raise AssertionError(self.stuck)
        case = self.turns
        await self.wolf.prompt(self.sid, f"case {case}")
        self.turns += 1
        deadline = asyncio.get_running_loop().time() + TURN_TIMEOUT
        for polls in range(10**9):
            try:
                status = await asyncio.wait_for(self.wolf.status(self.sid), 5)
            except (
                RPCError,
                WorkflowQueryFailedError,
                TimeoutError,
            ) as exc:  # a failed session, or no replay
                raise AssertionError(
                    f"status of turn {case} unavailable: {exc!r}; {await self.stuck_reason()}"
                ) from exc
            if status.counters.turns >= self.turns and status.state == "idle":
                return case
            timed_out = asyncio.get_running_loop().time() > deadline
            if timed_out or polls % 40 == 39:  # a failing workflow task retries forever: say so at once
                reason = await self.stuck_reason()
                if timed_out or reason != "no workflow task failed":
                    self.stuck = f"session stuck in turn {case} ({status.state}): {reason}"
                    raise AssertionError(self.stuck)
            await asyncio.sleep(0.05)
        raise AssertionError("unreachable")

    async def stuck_reason(self) -> str:
        history = await self.wolf.client.get_workflow_handle(workflow_id("default", self.sid)).fetch_history()
        for e in history.events:
            if e.event_type == EventType.EVENT_TYPE_WORKFLOW_EXECUTION_FAILED:
                return f"the session failed: {e.workflow_execution_failed_event_attributes.failure.message}"
        failed = [
            e.workflow_task_failed_event_attributes.failure.message
            for e in history.events
            if e.event_type == EventType.EVENT_TYPE_WORKFLOW_TASK_FAILED
        ]
        return f"workflow task failures: {failed[-1:]}" if failed else "no workflow task failed"


def _case(messages) -> int:
    return int(user_texts(messages)[-1].split()[1])


def _returned(messages, call_id: str) -> ToolReturnPart | None:
    last = messages[-1]
    if not isinstance(last, ModelRequest):
        return None
    return next((p for p in last.parts if isinstance(p, ToolReturnPart) and p.tool_call_id == call_id), None)


def _clear(content: object) -> bool:
    """A tool error a model (and a person reading the transcript) can act on."""
    return (
        isinstance(content, str)
        and bool(content.strip())
        and "Traceback" not in content
        and len(content) < 20_000
    )


# -- tool arguments ----------------------------------------------------------------------------------

_scalars = (
    st.none()
    | st.booleans()
    | st.integers()
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(max_size=20)
)
_json = st.recursive(
    _scalars,
    lambda kids: st.lists(kids, max_size=4) | st.dictionaries(st.text(max_size=8), kids, max_size=4),
    max_leaves=25,
)
_texts = st.one_of(
    st.text(),  # any unicode, control characters included
    st.builds(
        lambda c, n: c * n, st.characters(codec="utf-8"), st.integers(100_000, 400_000)
    ),  # up to ~1.6 MB
)


def _nested(depth: int) -> object:
    value: object = "bottom"
    for i in range(depth):
        value = [value] if i % 2 else {"k": value}
    return value


def _not_an_object_when_parsed(raw: str) -> bool:
    try:
        return not isinstance(pydantic_core.from_json(raw), dict)
    except ValueError:
        return False


_arguments = st.one_of(
    st.builds(lambda t: {"text": t}, _texts),
    st.builds(
        lambda t, extra: {**extra, "text": t}, _texts, st.dictionaries(st.text(max_size=8), _json, max_size=3)
    ),
    st.builds(lambda v: {"text": v}, _json.filter(lambda v: not isinstance(v, str))),  # the wrong type
    st.dictionaries(st.text(max_size=8).filter(lambda k: k != "text"), _json, max_size=4),  # no text
    st.builds(lambda d: {"text": "deep", "nested": _nested(d)}, st.integers(1, 400)),
    st.builds(lambda t: json.dumps({"text": t}), _texts),  # as a JSON string, the way providers send them
    st.text(max_size=60).filter(lambda raw: raw.strip() and not _not_an_object_when_parsed(raw)),  # not JSON
)


async def test_any_tool_arguments_reach_echo_or_fail_clearly(wolf, run_worker):
    cases: dict[int, object] = {}
    returned: dict[int, ToolReturnPart | None] = {}
    seen: Counter[str] = Counter()

    def decide(s: Script) -> ModelResponse:
        messages = s.requests[-1]
        case = _case(messages)
        if isinstance(messages[-1], ModelRequest) and any(
            p.part_kind == "user-prompt" for p in messages[-1].parts
        ):
            return ModelResponse(parts=[ToolCallPart("echo", cases[case], tool_call_id=f"case-{case}")])  # type: ignore[arg-type]
        returned[case] = _returned(messages, f"case-{case}")
        return text(f"done {case}")

    script = Script(decide)
    async with run_worker(local_models={"m": script.model}):
        session = _Session(wolf, await wolf.start_session("a", make_manifest()))

        async def check(args: object) -> None:
            cases[session.turns] = args
            case = await session.turn()
            status = await wolf.status(session.sid)
            parsed = args if isinstance(args, dict) else _parsed(args)
            if status.last_outcome != "completed":  # the turn itself failed: it must say why
                seen[f"turn {status.last_outcome}: {str(status.last_output)[:60]}"] += 1
                assert _clear(status.last_output), status.last_output
                return
            ret = returned.get(case)
            assert ret is not None, f"case {case}: no tool result reached the model"
            seen[
                f"{ret.outcome}: {str(ret.content)[:40]!r}"
                if ret.outcome != "success"
                else f"echoed {len(str(ret.content))} chars"
            ] += 1
            if isinstance(parsed, dict) and isinstance(parsed.get("text"), str):
                sent = parsed["text"]
                if (
                    len(sent) > TOOL_OUTPUT_CHARS
                ):  # the model sees it cut, with a note (the transcript keeps it)
                    sent = sent[:TOOL_OUTPUT_CHARS]
                    assert f"[cut: {TOOL_OUTPUT_CHARS} of {len(parsed['text'])} characters shown" in str(
                        ret.content
                    )
                assert ret.outcome == "success" and str(ret.content).startswith(sent), (
                    ret.outcome,
                    str(ret.content)[:200],
                )
                assert len(str(ret.content)) <= TOOL_OUTPUT_CHARS + 200
            else:
                assert ret.outcome == "failed" and _clear(ret.content), (ret.outcome, ret.content)

        loop = asyncio.get_running_loop()
        await asyncio.to_thread(_run_examples(loop, _arguments, check, examples=30))
        await wolf.close(session.sid)
        result = await wolf.result(session.sid)
    print("outcomes:", dict(seen))
    assert result.counters.turns == session.turns >= 30


def _parsed(raw: object) -> object:
    try:
        return pydantic_core.from_json(raw) if isinstance(raw, str) and raw else {}
    except ValueError:
        return None


async def test_arguments_that_are_json_but_not_an_object_fail_the_call_clearly(env, wolf, task_queue):
    """A real provider path (`openai:` against a scripted server) and a real worker process."""

    def reply(request: dict) -> Reply:
        return Reply(text="done") if tool_outputs(request) else Reply(tool_calls=[("echo", [1, 2])])  # type: ignore[list-item]

    with ScriptedOpenAI(reply) as server:
        worker = worker_process(env, task_queue)
        sid = None
        try:
            sid = await wolf.start_session(
                "a", openai_manifest(server.base_url, mcp_servers={"tools": tools_server()})
            )
            await _Session(wolf, sid).turn()
            transcript = await wolf.transcript(sid)
        finally:
            if sid is not None:
                with contextlib.suppress(RPCError):
                    await wolf.client.get_workflow_handle(workflow_id("default", sid)).terminate("test over")
            end(worker)
    (ret,) = [
        p for m in transcript if isinstance(m, ModelRequest) for p in m.parts if isinstance(p, ToolReturnPart)
    ]
    assert ret.outcome == "failed" and _clear(ret.content)


# -- MCP responses ---------------------------------------------------------------------------------

BROKEN = (
    "malformed",
    "not-jsonrpc",
    "wrong-id",
    "never",
    "crash",
    "invalid-utf8",
    "no-result-type",
    "null-result",
    "bad-content",
    "unknown-block",
)
"""Answers that never make a result: each runs once explicitly, then as hypothesis draws them."""
_answers = st.one_of(
    st.sampled_from([{"mode": m} for m in BROKEN]),
    st.builds(
        lambda m, c: {"mode": "error", "message": m, "code": c},
        st.text(max_size=3000),
        st.integers(-(2**31), 2**31 - 1),
    ),
    st.builds(lambda t: {"mode": "is-error", "text": t}, st.text(max_size=200)),
    st.builds(
        lambda n, c: {"mode": "huge", "size": n, "char": c},
        st.integers(300_000, 700_000),
        st.characters(codec="utf-8"),
    ),
    st.builds(lambda s: {"mode": "slow", "seconds": s}, st.floats(0, 0.3)),
)


def _hostile_server(log=None, **config: Any) -> dict[str, Any]:
    env = {"WOLF_HOSTILE_LOG": str(log)} if log else {}
    return {
        "command": sys.executable,
        "args": [HOSTILE_SERVER],
        "env": env,
        "call_timeout": 2,
        "connect_timeout": 20,
        **config,
    }


def _answer_then_echo(cases: dict[int, dict], answered: dict, echoed: dict) -> Script:
    """Each turn: `answer(<the case>)`, then `echo("alive <case>")`, then a text."""

    def decide(s: Script) -> ModelResponse:
        messages = s.requests[-1]
        case = _case(messages)
        if any(p.part_kind == "user-prompt" for p in messages[-1].parts):
            return ModelResponse(parts=[ToolCallPart("answer", cases[case], tool_call_id=f"answer-{case}")])
        if (ret := _returned(messages, f"answer-{case}")) is not None:
            answered[case] = ret
            return ModelResponse(
                parts=[ToolCallPart("echo", {"text": f"alive {case}"}, tool_call_id=f"echo-{case}")]
            )
        echoed[case] = _returned(messages, f"echo-{case}")
        return text(f"done {case}")

    return Script(decide)


async def test_hostile_mcp_answers_become_clear_tool_errors_and_the_next_call_works(
    wolf, run_worker, tmp_path
):
    cases: dict[int, dict] = {}
    answered: dict[int, ToolReturnPart] = {}
    echoed: dict[int, ToolReturnPart | None] = {}
    log = tmp_path / "modes"
    manifest = make_manifest(
        {"capabilities": [{"mcp": "hostile"}]}, mcp_servers={"hostile": _hostile_server(log)}
    )
    script = _answer_then_echo(cases, answered, echoed)
    async with run_worker(local_models={"m": script.model}):
        session = _Session(wolf, await wolf.start_session("a", manifest))

        async def check(answer: dict) -> None:
            cases[session.turns] = answer
            case = await session.turn()
            status = await wolf.status(session.sid)
            assert status.last_outcome == "completed", status.last_output
            ret, echo = answered[case], echoed.get(case)
            assert echo is not None
            mode = answer["mode"]
            if mode == "huge":  # reaches the model cut to the limit, with a note
                whole = answer["char"] * answer["size"]
                assert ret.outcome == "success" and str(ret.content).startswith(whole[:TOOL_OUTPUT_CHARS])
                assert f"[cut: {TOOL_OUTPUT_CHARS} of {len(whole)} characters shown" in str(ret.content)
            elif mode == "slow":  # no wall-clock promise: fine, or the timeout's clear error
                assert ret.content == "slow but fine" or (
                    ret.outcome == "failed" and "timed out" in ret.content
                )
            elif mode == "is-error":  # the server's own words, whatever they are
                assert ret.outcome == "failed" and ret.content == answer["text"]
            else:
                assert ret.outcome == "failed" and _clear(ret.content), (
                    mode,
                    ret.outcome,
                    str(ret.content)[:300],
                )
            # Whatever the last answer was, the server (reconnected if it died) serves the next call.
            assert echo.outcome == "success" and echo.content == f"alive {case}", (mode, echo.content)

        loop = asyncio.get_running_loop()
        explicit = tuple({"mode": m} for m in BROKEN)
        await asyncio.to_thread(_run_examples(loop, _answers, check, examples=18, explicit=explicit))
        await wolf.close(session.sid)
        await wolf.result(session.sid)
    served = sorted(set(log.read_text().split()))
    print(f"modes served: {served}")
    assert set(BROKEN) | {"error", "is-error", "huge", "slow"} <= set(served)


async def test_after_invalid_utf8_the_next_call_to_the_server_works(wolf, run_worker):
    cases, answered, echoed = {0: {"mode": "invalid-utf8"}}, {}, {}
    manifest = make_manifest(
        {"capabilities": [{"mcp": "hostile"}]}, mcp_servers={"hostile": _hostile_server()}
    )
    async with run_worker(local_models={"m": _answer_then_echo(cases, answered, echoed).model}):
        session = _Session(wolf, await wolf.start_session("a", manifest))
        await session.turn()
    assert answered[0].outcome == "failed" and _clear(answered[0].content)
    assert echoed[0] is not None and (echoed[0].outcome, echoed[0].content) == ("success", "alive 0")


@pytest.mark.parametrize("mode", ["no-result-type", "unknown-block"])
async def test_an_answer_the_mcp_client_cannot_parse_is_a_tool_error(wolf, run_worker, mode):
    cases, answered, echoed = {0: {"mode": mode}}, {}, {}
    manifest = make_manifest(
        {"capabilities": [{"mcp": "hostile"}]}, mcp_servers={"hostile": _hostile_server()}
    )
    async with run_worker(local_models={"m": _answer_then_echo(cases, answered, echoed).model}):
        session = _Session(wolf, await wolf.start_session("a", manifest))
        await session.turn()
        status = await wolf.status(session.sid)
    assert status.last_outcome == "completed", status.last_output
    assert answered[0].outcome == "failed" and _clear(answered[0].content)
    assert echoed[0] is not None and echoed[0].content == "alive 0"


async def test_a_failing_known_fast_tool_call_does_not_end_the_session(wolf, run_worker):
    cases = {0: {"mode": "slow", "seconds": 0}, 1: {"mode": "bad-content"}}
    answered: dict[int, ToolReturnPart] = {}
    echoed: dict[int, ToolReturnPart | None] = {}
    server = _hostile_server(
        fast_call_ms=10**8
    )  # every call after the first is "known fast": a local activity
    manifest = make_manifest({"capabilities": [{"mcp": "hostile"}]}, mcp_servers={"hostile": server})
    async with run_worker(local_models={"m": _answer_then_echo(cases, answered, echoed).model}):
        session = _Session(wolf, await wolf.start_session("a", manifest))
        await session.turn()
        await session.turn()  # AssertionError "... the session failed: ... validation errors ..." today
        status = await wolf.status(session.sid)
    assert status.state == "idle"
