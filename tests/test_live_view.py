"""The follow renderer on synthetic event sequences (the event contract of issue 13), no server."""

from __future__ import annotations

import asyncio
import io
import json
import re
from datetime import UTC, datetime, timedelta
from types import SimpleNamespace

from rich.console import Console

from agentwolf.cli import live_view
from agentwolf.cli.live_view import RESTARTED, ConsoleSink, LiveView, PlainSink, follow, json_line
from agentwolf.workflows.types import Event

T0 = datetime(2026, 11, 30, 12, 0, tzinfo=UTC)
RAW = re.compile("[\x00-\x08\x0b-\x1f\x7f-\x9f\u202a-\u202e\u2066-\u2069]")


def ev(kind: str, **fields) -> Event:
    fields.setdefault("turn_id", "t1")
    return Event(kind=kind, at=fields.pop("at", T0), **fields)


def delta(text: str, index: int, step: int = 1, attempt: int = 1, kind: str = "text_delta") -> Event:
    return ev(kind, step=step, attempt=attempt, index=index, text=text)


def plain(events: list[Event]) -> str:
    buf = io.StringIO()
    view = LiveView(PlainSink(buf), "s1")
    for event in events:
        view.feed(event)
    view.end_line()
    return buf.getvalue()


def lines(events: list[Event], width: int = 80) -> tuple[list[str], LiveView]:
    buf = io.StringIO()
    console = Console(file=buf, width=width, force_terminal=False, color_system=None)
    view = LiveView(ConsoleSink(console), "s1")
    for event in events:
        view.feed(event)
    return buf.getvalue().splitlines(), view


ANSWER = "Hello, world.\nSecond line."
STREAMED = [
    ev("turn_started", text="hi"),
    delta("Hel", 0),
    delta("lo, wor", 3),
    delta("ld.\nSecond", 10),
    delta(" line.", 20),  # the client's last delta before model_text: the rest
    ev("model_text", step=1, text=ANSWER),
    ev("turn_finished", step=1, outcome="completed"),
]


def test_deltas_print_the_text_once_and_model_text_adds_nothing():
    out = plain(STREAMED)
    assert out.count("Hello, world.") == 1 and out.count("Second line.") == 1
    assert out == "> hi\nHello, world.\nSecond line.\nturn completed\n"


def test_without_deltas_model_text_prints_whole():
    out = plain([e for e in STREAMED if e.kind != "text_delta"])
    assert out == "> hi\nHello, world.\nSecond line.\nturn completed\n"


def test_model_text_adds_what_deltas_did_not_show():
    out = plain([STREAMED[0], delta("Hel", 0), *STREAMED[5:]])
    assert out == "> hi\nHello, world.\nSecond line.\nturn completed\n"


def test_a_reconnect_replaying_deltas_shows_only_what_is_new():
    events = [STREAMED[0], delta("Hel", 0), delta("Hello, wor", 0), delta("lo, wor", 3), *STREAMED[3:]]
    assert plain(events) == "> hi\nHello, world.\nSecond line.\nturn completed\n"


def test_superseded_attempt_says_so_and_the_retried_text_follows():
    events = [
        ev("turn_started", text="hi"),
        delta("Draft ans", 0, attempt=1),
        ev("attempt_superseded", step=1, attempt=1),
        delta("Draft more", 9, attempt=1),  # late delta of the dropped attempt: ignored
        delta("Final", 0, attempt=2),
        delta(" answer", 5, attempt=2),
        ev("model_text", step=1, text="Final answer"),
        ev("turn_finished", step=1, outcome="completed"),
    ]
    out = plain(events)
    assert out == f"> hi\nDraft ans\n{RESTARTED}\nFinal answer\nturn completed\n"
    # Rendered text minus the superseded attempt equals the final answer exactly once.
    assert out.split(RESTARTED + "\n")[1].count("Final answer") == 1


def test_superseded_before_any_text_says_nothing():
    events = [
        ev("turn_started", text="hi"),
        ev("attempt_superseded", step=1, attempt=1),
        delta("ok", 0, attempt=2),
    ]
    assert RESTARTED not in plain(events)


def test_thinking_is_its_own_line_and_dim_on_a_terminal():
    events = [
        ev("turn_started", text="hi"),
        delta("let me think", 0, kind="thinking_delta"),
        delta("Answer", 0),
        ev("model_text", step=1, text="Answer"),
    ]
    assert plain(events) == "> hi\nlet me think\nAnswer\n"
    buf = io.StringIO()
    view = LiveView(ConsoleSink(Console(file=buf, force_terminal=True, color_system="standard", width=80)))
    for event in events:
        view.feed(event)
    assert "\x1b[2mlet me think" in buf.getvalue()


def test_terminal_view_keeps_the_unfinished_line_in_the_live_region():
    printed, view = lines(STREAMED[:3])
    assert printed == ["> hi"] and view.tail.plain == "Hello, wor"
    printed, view = lines(STREAMED[:4])
    assert printed == ["> hi", "Hello, world."] and view.tail.plain == "Second"
    printed, view = lines(STREAMED)
    assert printed == ["> hi", "Hello, world.", "Second line.", "turn completed"] and not view.tail


def test_a_long_unfinished_line_is_printed_at_a_space():
    words = ("word " * 200).strip()
    printed, view = lines([ev("turn_started", text="hi"), delta(words, 0)], width=40)
    assert len(view.tail) <= 4 * 40
    assert " ".join([*printed[1:], view.tail.plain]).split() == words.split()


def test_spinner_until_the_first_token_and_tool_lines_with_progress(monkeypatch):
    # A stopped clock: the live line shows the reported 5 s however long this test takes.
    monkeypatch.setattr(live_view, "time", SimpleNamespace(monotonic=lambda: 100.0))
    _, view = lines([ev("turn_started", text="hi")])
    assert view.waiting
    _, view = lines(STREAMED[:2])
    assert not view.waiting
    started = ev(
        "tool_call_started",
        step=1,
        tool="slow",
        call_id="c1",
        args={"seconds": 3},
        at=T0 - timedelta(seconds=5),
    )
    progress = ev(
        "tool_progress", step=1, call_id="c1", progress=3, total=10, text="copying", duration_ms=5000
    )
    printed, view = lines([ev("turn_started", text="hi"), started, progress])
    assert printed[-1] == '  -> slow({"seconds": 3})' and not view.waiting
    tool = view.tools["c1"]
    assert (tool.progress, tool.total, tool.message) == (3, 10, "copying") and tool.elapsed() == 5
    region = io.StringIO()
    Console(file=region, width=100, color_system=None).print(view.region())
    assert (
        "slow" in region.getvalue() and "5.0s" in region.getvalue() and "copying (3/10)" in region.getvalue()
    )
    finished = ev(
        "tool_call_finished",
        step=1,
        tool="slow",
        call_id="c1",
        outcome="success",
        duration_ms=5100,
        text="ok",
    )
    printed, view = lines([ev("turn_started", text="hi"), started, progress, finished])
    assert not view.tools and view.waiting and printed[-1] == "  <- slow success in 5100 ms: ok"


def test_plain_output_prints_tool_progress_only_when_its_message_changes():
    started = ev("tool_call_started", step=1, tool="copy", call_id="c1", args={})
    progress = [
        ev("tool_progress", call_id="c1", progress=p, total=3, text=m)
        for p, m in ((1, "a"), (2, "a"), (3, "b"))
    ]
    out = plain([started, *progress])
    assert out.count("  .. copy:") == 2 and "  .. copy: b (3/3)" in out


def test_controls_in_deltas_are_shown_not_sent():
    evil = "clear\x1b[2J csi\x9b31m rtl\u202eevil"
    events = [
        ev("turn_started", text=evil),
        delta(evil[:7], 0),
        delta(evil[7:], 7),
        ev("model_text", step=1, text=evil),
    ]
    out = plain(events)
    assert RAW.search(out) is None and out.count(r"clear\x1b[2J csi\x9b31m rtl\u202eevil") == 2
    printed, _ = lines(events)
    assert RAW.search("\n".join(printed)) is None


def test_json_line_is_the_event_with_its_offset():
    event = delta("x\x1b", 4)
    record = json.loads(json_line(7, event))
    assert (
        record["offset"] == 7
        and record["kind"] == "text_delta"
        and record["text"] == "x\x1b"
        and record["index"] == 4
    )
    assert "tool" not in record  # exclude_none


async def test_follow_writes_json_lines_and_stops_at_the_end():
    async def events():
        for i, event in enumerate([*STREAMED, ev("session_closed"), ev("turn_started", text="never")]):
            yield i, event

    buf = io.StringIO()
    await follow(events(), Console(file=buf), "s1", as_json=True)
    kinds = [json.loads(line)["kind"] for line in buf.getvalue().splitlines()]
    assert kinds[1:5] == ["text_delta"] * 4 and kinds[-1] == "session_closed"
    buf = io.StringIO()
    await follow(events(), Console(file=buf), "s1", until_turn_end=True)
    assert buf.getvalue() == "> hi\nHello, world.\nSecond line.\nturn completed\n"


async def test_follow_on_a_terminal_leaves_only_finished_lines():
    async def events():
        for i, event in enumerate(STREAMED):
            yield i, event

    buf = io.StringIO()
    console = Console(file=buf, force_terminal=True, color_system=None, width=60)
    await follow(events(), console, "s1", until_turn_end=True)
    screen = _screen(buf.getvalue(), 60)
    assert [line for line in screen if line] == ["> hi", "Hello, world.", "Second line.", "turn completed"]


def _screen(data: str, width: int, height: int = 24) -> list[str]:
    import pyte

    screen = pyte.Screen(width, height)
    pyte.Stream(screen).feed(data.replace("\n", "\r\n"))
    return [line.rstrip() for line in screen.display]


def _terminal(events: list[Event], height: int = 24) -> list[str]:
    async def source():
        for i, event in enumerate(events):
            yield i, event

    buf = io.StringIO()
    console = Console(file=buf, force_terminal=True, color_system=None, width=60, height=height)
    asyncio.run(follow(source(), console, "s1", until_turn_end=True))
    return [line for line in _screen(buf.getvalue(), 60, height) if line]


# A worker lost mid-answer: attempt 1 printed two lines and part of a third, the retry streams it all.
LOST = [
    ev("turn_started", text="hi"),
    delta("Draft one.\nDraft two.\nDraft", 0, attempt=1),
    ev("attempt_superseded", step=1, attempt=1),
    delta("Final one.\nFinal", 0, attempt=2),
    delta(" two.", 16, attempt=2),
    ev("model_text", step=1, text="Final one.\nFinal two."),
    ev("turn_finished", step=1, outcome="completed"),
]


def test_on_a_terminal_a_superseded_attempt_is_taken_back():
    assert _terminal(LOST) == ["> hi", "Final one.", "Final two.", "turn completed"]
    # A newer attempt's first delta without the announcement takes the old one back too.
    assert _terminal([e for e in LOST if e.kind != "attempt_superseded"]) == _terminal(LOST)


def test_text_scrolled_off_the_terminal_stays_and_says_the_answer_restarted():
    long = "".join(f"Draft {i}.\n" for i in range(30))
    screen = _terminal([LOST[0], delta(long, 0, attempt=1), *LOST[2:]], height=24)
    assert screen[-4:] == [RESTARTED, "Final one.", "Final two.", "turn completed"]


def test_on_a_terminal_an_aside_read_after_the_first_delta_goes_above_the_unfinished_line():
    events = [
        ev("turn_started", text="hi"),
        delta("word0 ", 0),
        ev("compiled", step=1, text="a is ready: model local:m"),
        delta("word1", 6),
        ev("model_text", step=1, text="word0 word1"),
    ]
    printed, _ = lines(events)
    assert printed == ["> hi", "  a is ready: model local:m", "word0 word1"]
    assert plain(events) == "> hi\nword0 \n  a is ready: model local:m\nword1\n"  # written: it stays


def test_on_a_terminal_an_aside_read_during_an_attempt_is_kept_and_the_attempt_taken_back():
    # A follower under load reads `compiled` after the attempt's first delta, or after its first line.
    aside = ev("compiled", step=1, text="a is ready: model local:m")
    before_a_line = [LOST[0], delta("Draft ", 0), aside, delta("one.\nDraft two.\nDraft", 6), *LOST[2:]]
    after_a_line = [LOST[0], delta("Draft one.\n", 0), aside, delta("Draft two.\nDraft", 11), *LOST[2:]]
    kept = ["> hi", "  a is ready: model local:m", "Final one.", "Final two.", "turn completed"]
    assert _terminal(before_a_line) == kept
    assert _terminal(after_a_line) == kept
    # Without the announcement (the retry's first delta comes first) too.
    assert _terminal([e for e in after_a_line if e.kind != "attempt_superseded"]) == kept


def test_a_call_waiting_for_approval_shows_no_clock_and_runs_from_the_answer():
    started = ev("tool_call_started", step=1, tool="record", call_id="c1", args={}, at=T0)
    asked = ev("approval_requested", step=1, tool="record", call_id="c1", args={}, at=T0)
    answered = ev(
        "approval_resolved",
        step=1,
        tool="record",
        call_id="c1",
        outcome="approved",
        at=T0 + timedelta(minutes=5),
    )
    _, view = lines([ev("turn_started", text="hi"), started, asked])
    region = io.StringIO()
    Console(file=region, width=100, color_system=None).print(view.region())
    assert "record" in region.getvalue() and "waits for approval" in region.getvalue()
    assert not re.search(r"\d", region.getvalue().split("record", 1)[1])  # no clock while it waits
    _, view = lines([ev("turn_started", text="hi"), started, asked, answered])
    assert view.tools["c1"].elapsed(T0 + timedelta(minutes=5, seconds=2)) == 2  # not 302
