"""The bundled example on the offline demo model: it loads the skill, reads its zone table, calls the
published time server with the city's zone and answers a sentence, streamed."""

from __future__ import annotations

import re

from agentwolf.cli.live_view import DEMO_NOTE, event_line
from agentwolf.cli.sources import BUNDLED_CONFIG
from agentwolf.config.loading import load_manifest


async def test_the_demo_answers_with_the_city_s_time(wolf, run_worker, monkeypatch):
    monkeypatch.delenv("WOLF_MODEL", raising=False)
    manifest = load_manifest(BUNDLED_CONFIG)
    async with run_worker():
        sid = await wolf.submit("What time is it in Tokyo?", "assistant", manifest)
        events = [event async for _, event in wolf.events(sid)]
        result = await wolf.result(sid)
    calls = [(e.tool, e.args) for e in events if e.kind == "tool_call_started"]
    assert calls == [
        ("load_skill", {"name": "time-zones"}),
        ("read_skill_file", {"name": "time-zones", "path": "zones.md"}),
        ("get_current_time", {"timezone": "Asia/Tokyo"}),
    ]
    assert all(e.outcome == "success" for e in events if e.kind == "tool_call_finished")
    assert re.match(r"It is \d\d:\d\d on \w+day in Asia/Tokyo \(UTC\+09:00\)\.", result.output or ""), (
        result.output
    )
    assert "demo model" not in (result.output or "")  # /v1 and MCP clients get the answer alone
    ready = next(e for e in events if e.kind == "compiled")
    shown = str(event_line(ready))
    assert shown.splitlines()[1] == f"  {DEMO_NOTE}" and "model local:demo" in shown  # the person sees it
    assert (
        sum(e.kind == "text_delta" and e.attempt is not None for e in events) > 1
    )  # it streams (a short answer: a few batches)
    kinds = [e.kind for e in events]
    # Live text of the last step comes after the durable end of the step before it.
    assert kinds.index("text_delta") > max(i for i, k in enumerate(kinds) if k == "tool_call_finished")


async def test_the_demo_says_what_it_can_do_and_admits_an_unknown_zone(wolf, run_worker, monkeypatch):
    monkeypatch.delenv("WOLF_MODEL", raising=False)
    manifest = load_manifest(BUNDLED_CONFIG)
    async with run_worker():
        hello = await wolf.result(await wolf.submit("hello", "assistant", manifest))
        atlantis = await wolf.result(await wolf.submit("What time is it in Atlantis?", "assistant", manifest))
    assert "offline demo model" in (hello.output or "") and "Tokyo" in (hello.output or "")
    assert (atlantis.output or "").startswith("I do not know the time zone of Atlantis")
