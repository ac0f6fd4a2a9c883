"""Hostile input: every case gets a clear outcome and no workflow gets stuck."""

from __future__ import annotations

import random
import sys

import pytest
import yaml
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st
from pydantic_ai.messages import ModelResponse, ToolReturnPart
from temporalio.service import RPCError

from agentwolf.config import ManifestError, parse_manifest
from tests.conftest import SUPPORT, make_manifest, tools_server, wait_for
from tests.support.models import Script, sequence, text, tool, user_texts
from tests.support.polls import idle, tool_call_ids, tool_returns

# -- manifests -----------------------------------------------------------------------------------

_keys = st.sampled_from(
    [
        "host",
        "agents",
        "models",
        "mcp_servers",
        "aliases",
        "providers",
        "defaults",
        "model",
        "command",
        "url",
        "capabilities",
        "mcp",
        "subagent",
        "limits",
        "max_steps",
        "teams",
        "members",
        "permissions",
        "rules",
        "x",
    ]
)
_scalars = st.one_of(st.none(), st.booleans(), st.integers(), st.floats(allow_nan=True), st.text(max_size=20))
_trees = st.recursive(
    _scalars,
    lambda kids: st.lists(kids, max_size=4) | st.dictionaries(_keys, kids, max_size=5),
    max_leaves=30,
)


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.dictionaries(_keys, _trees, max_size=6))
def test_any_manifest_tree_loads_or_fails_with_a_manifest_error(tree):
    try:
        text_ = yaml.safe_dump(tree)
    except yaml.YAMLError:
        return
    try:
        parse_manifest(text_, source="fuzz.yaml")
    except ManifestError as exc:
        assert str(exc).startswith("fuzz.yaml:")


@settings(max_examples=300, deadline=None)
@given(st.text(max_size=200))
@example("A:")  # an unknown key that starts upper case (once taken for a union tag: IndexError)
def test_any_text_loads_or_fails_with_a_manifest_error(source):
    try:
        parse_manifest(source, source="fuzz.yaml")
    except ManifestError as exc:
        assert str(exc).startswith("fuzz.yaml")


# -- prompts, steers, signals ------------------------------------------------------------------------


def _nasty_strings(seed: int, n: int) -> list[str]:
    rng = random.Random(seed)
    alphabet = [
        "\x00",
        "\x1b[31m",
        "\u202e",
        "𝕏",
        "\ufeff",
        "'",
        '"',
        "\\",
        "${OPENAI_API_KEY}",
        "\n",
        "{",
        "}",
        "<",
        "é",
        " ",
    ]
    return [
        "".join(rng.choice(alphabet) for _ in range(rng.randint(1, 40)))
        + rng.choice(["", "a", "/slash", "  "])
        for _ in range(n)
    ]


async def test_nasty_prompts_and_steers_round_trip_exactly(wolf, run_worker):
    strings = [s for s in _nasty_strings(7, 30) if s.strip()]
    script = Script(lambda s: text(user_texts(s.requests[-1])[-1]))
    async with run_worker(local_models={"m": script.model}):
        sid = await wolf.start_session("a", make_manifest())
        for s in strings:
            await wolf.prompt(sid, s)
        await wait_for(lambda: idle(wolf, sid, len(strings)), timeout=60)
        transcript = await wolf.transcript(sid)
        await wolf.close(sid)
    assert user_texts(transcript) == strings  # byte for byte, in order, once each
    assert [m.parts[0].content for m in transcript if isinstance(m, ModelResponse)] == strings


async def test_empty_prompt_is_refused(wolf, run_worker):
    from temporalio.client import WorkflowUpdateFailedError

    async with run_worker(local_models={"m": Script(sequence(text("x"))).model}):
        sid = await wolf.start_session("a", make_manifest())
        with pytest.raises(WorkflowUpdateFailedError) as refused:
            await wolf.prompt(sid, "   ")
        assert "empty prompt" in str(refused.value.cause)
        await wolf.close(sid)


async def test_signals_in_bad_order(wolf, run_worker):
    # No turn can end by itself (its tool outlasts every deadline here): each ends only if an
    # interrupt reaches it, so a lost interrupt leaves the session running and the wait fails.
    script = Script(lambda s: tool("slow", {"seconds": 600}))
    async with run_worker(local_models={"m": script.model}):
        sid = await wolf.start_session("a", make_manifest())
        await wolf.interrupt(sid, "before anything")  # idle: nothing to interrupt
        with pytest.raises(ValueError, match="waits for approval"):
            await wolf.approve(sid, "no-such-call")
        await wolf.prompt(sid, "first")
        for i in range(100):  # a burst of steers and interrupts while a turn runs
            await (wolf.steer(sid, f"steer {i}") if i % 3 else wolf.interrupt(sid, f"burst {i}"))
        await wait_for(lambda: _quiet(wolf, sid), timeout=240)
        transcript = await wolf.transcript(sid)
        await wolf.close(sid)
        result = await wolf.result(sid)
        with pytest.raises(RPCError, match="already completed"):
            await wolf.steer(sid, "after close")
        outcomes = [e.outcome async for _, e in wolf.events(sid, live=False) if e.kind == "turn_finished"]
    # Every steer is in the transcript exactly once, and every tool call has exactly one result.
    # (steers that arrive while idle start one turn together, joined by newlines)
    steers = [line for t in user_texts(transcript) for line in t.split("\n") if line.startswith("steer ")]
    assert sorted(steers) == sorted(f"steer {i}" for i in range(100) if i % 3)
    calls = tool_call_ids(transcript)
    returns = [p.tool_call_id for p in tool_returns(transcript)]
    assert sorted(calls) == sorted(returns) and len(set(returns)) == len(returns)
    # Every turn was interrupted (the first by "burst 0", the last by "burst 99" at the latest).
    assert outcomes and set(outcomes) == {"interrupted"} and result.outcome == "interrupted"


async def _quiet(wolf, sid):
    status = await wolf.status(sid)
    return status.state == "idle" and status.queued == 0


# -- tool arguments and MCP responses -------------------------------------------------------------


async def test_wrong_argument_types_become_tool_errors(wolf, run_worker):
    script = Script(sequence(tool("add", {"a": "not a number", "b": [1]}), text("ok")))
    async with run_worker(local_models={"m": script.model}):
        result = await wolf.result(await wolf.submit("x", "a", make_manifest()))
    (ret,) = [p for p in script.requests[1][-1].parts if isinstance(p, ToolReturnPart)]
    assert result.output == "ok" and ret.outcome == "failed" and "validation error" in ret.content.lower()


async def test_a_tool_that_never_answers_times_out_as_a_tool_error(wolf, run_worker):
    server = {**tools_server(), "call_timeout": 1.0}
    script = Script(sequence(tool("slow", {"seconds": 3600}), text("moved on")))
    async with run_worker(local_models={"m": script.model}):
        result = await wolf.result(await wolf.submit("x", "a", make_manifest(mcp_servers={"tools": server})))
    (ret,) = [p for p in script.requests[1][-1].parts if isinstance(p, ToolReturnPart)]
    assert result.output == "moved on" and ret.outcome == "failed" and "timed out" in ret.content


async def test_malformed_mcp_responses_fail_the_connect_clearly(wolf, run_worker):
    from temporalio.client import WorkflowFailureError

    garbage = {"command": sys.executable, "args": [str(SUPPORT / "garbage_server.py")], "connect_timeout": 3}
    async with run_worker(local_models={"m": Script(sequence(text("x"))).model}):
        sid = await wolf.submit("x", "a", make_manifest(mcp_servers={"tools": garbage}))
        with pytest.raises(WorkflowFailureError) as failure:
            await wolf.result(sid)
    assert "MCP server 'tools' is unavailable" in str(failure.value.cause)
