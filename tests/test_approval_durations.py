"""A tool call that waited for approval reports how long the tool ran, not how long the person took
to answer (issue 24: `success in 5842 ms` for a call that ran in milliseconds)."""

from __future__ import annotations

from tests.conftest import make_manifest, tools_server, wait_for
from tests.support.models import Script, sequence, text, tool


def _ms(later, earlier) -> int:
    return int((later - earlier).total_seconds() * 1000)


async def test_the_tool_line_counts_from_the_answer_not_from_the_request(wolf, run_worker, tmp_path):
    rules = [{"tool": "record", "action": "confirm"}]
    manifest = make_manifest(
        {"permissions": {"rules": rules}},
        mcp_servers={"tools": tools_server(WOLF_SIDE_EFFECTS=str(tmp_path / "effects"))},
    )
    script = Script(sequence(tool("record", {"tag": "x"}, "c1"), text("done")))
    async with run_worker(local_models={"m": script.model}):
        sid = await wolf.submit("record it", "a", manifest)
        await wait_for(lambda: _waiting(wolf, sid))
        await wolf.approve(sid, "c1")
        assert (await wolf.result(sid)).output == "done"
        events = {e.kind: e async for _, e in wolf.events(sid, live=False)}
    started, resolved, finished = (
        events[k] for k in ("tool_call_started", "approval_resolved", "tool_call_finished")
    )
    assert resolved.at > started.at  # the person answered in a later workflow task
    # Workflow time (workflow.now()), so exact: from the answer to the result.
    assert finished.duration_ms == _ms(finished.at, resolved.at) < _ms(finished.at, started.at)


async def _waiting(wolf, sid):
    return (await wolf.status(sid)).pending_approvals
