"""How a session's events look in a terminal: streamed text, a spinner, a live line per running tool.

`LiveView` turns `(offset, Event)` pairs from `WolfClient.events()` into output. It writes through a
`Sink`: `PlainSink` writes text as it comes and nothing else (no control sequences: for pipes and
logs); `RichSink` keeps a bottom region (the unfinished line of streamed text, a spinner while the
model has not answered yet, one line per running tool) in a rich `Live` and prints finished lines
above it. `wolf chat` shows the same region in its prompt (`agentwolf.cli.chat`).

Deltas (`text_delta`, `thinking_delta`) are printed as they come and the durable `model_text` only
adds what they did not show (nothing, when every delta arrived); `attempt_superseded` drops an
attempt's text: on a terminal its rows are erased (while they are still on the screen), so the
screen ends with the final answer once; plain output cannot take back what it wrote, so it says so
and the retried text follows.
Everything from the session is data: it goes through `inert()`, and lines are rich `Text`, never markup.

Over 500 lines on purpose: one view of a session's events, its lines (`event_line`) and the live
region beside them change together; `wolf chat` shows the same view (chat.py).
"""

from __future__ import annotations

import json
import math
import time
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import IO, Protocol

from rich.console import Console, Group, RenderableType
from rich.control import Control
from rich.live import Live
from rich.progress_bar import ProgressBar
from rich.segment import ControlType
from rich.spinner import Spinner
from rich.table import Table
from rich.text import Text

from agentwolf.cli.render import inert
from agentwolf.workflows.types import Event

RESTARTED = "(answer restarted: the model request is retried)"
WAITING = "waiting for the model"
DEMO_MODEL = "local:demo"
DEMO_NOTE = (
    "(offline demo model; for a real one: WOLF_MODEL=openai:gpt-4o-mini and OPENAI_API_KEY,"
    " then `wolf up --restart`)"
)
"""Said under the "is ready" line of an agent on the demo model: to the person, not in the answer."""
ASIDES = frozenset({"compiled", "limit_warning", "config_changed", "extensions_changed", "context_compacted"})
"""Durable events that do not end the text being streamed: on a terminal their line goes above the
unfinished one (a follower may read `compiled` after the step's first delta), and a superseded
attempt is still taken back (the aside is printed again)."""
TAIL_ROWS = 4
"""An unfinished line of streamed text taller than this many rows is printed (cut at a space)."""


def json_line(offset: int, event: Event) -> str:
    """One JSON Lines record: the event (`exclude_none`) with its stream offset first."""
    body = event.model_dump_json(exclude_none=True)
    return f'{{"offset":{offset},{body[1:]}' if body != "{}" else f'{{"offset":{offset}}}'


class Sink(Protocol):
    """Where a view writes. `line` prints a finished line; `chunk` part of one (plain output only)."""

    partial: bool
    """True: streamed text is written as it comes (`chunk`); False: only whole lines (`line`), the
    unfinished one is part of the live region."""

    rows: int
    """Rows printed so far (what `take_back` counts in)."""

    def line(self, text: Text) -> None: ...

    def chunk(self, text: Text) -> None: ...

    def take_back(self, rows: int) -> bool:
        """Erase the last `rows` printed rows; False when this output cannot."""
        ...


class PlainSink:
    """Text as it comes, no control sequences, no spinner: for pipes, files and logs."""

    partial = True
    rows = 0

    def __init__(self, file: IO[str]) -> None:
        self.file = file

    def line(self, text: Text) -> None:
        self.file.write(text.plain + "\n")
        self.file.flush()

    def chunk(self, text: Text) -> None:
        self.file.write(text.plain)
        self.file.flush()

    def take_back(self, rows: int) -> bool:
        return False


class ConsoleSink:
    """Whole lines through a rich console (styled when it is a terminal)."""

    partial = False

    def __init__(self, console: Console) -> None:
        self.console = console
        self.rows = 0

    def line(self, text: Text) -> None:
        self.console.print(text, soft_wrap=True, markup=False, highlight=False, emoji=False)
        self.rows += max(1, math.ceil(text.cell_len / self.console.width))  # the terminal wraps it

    def take_back(self, rows: int) -> bool:
        """On a terminal, and while the rows are on the screen (below them at most the live region,
        TAIL_ROWS of streamed text): up a row and erase it, `rows` times. Printed as a renderable, so
        inside a rich `Live` it starts where the live region did, which is redrawn after it."""
        if not self.console.is_terminal or rows + TAIL_ROWS >= self.console.height:
            return False
        if rows:
            up = ((ControlType.CURSOR_UP, 1), (ControlType.ERASE_IN_LINE, 2))
            self.console.print(Control((ControlType.CARRIAGE_RETURN,), *up * rows), end="")
            self.rows -= rows
        return True

    def chunk(self, text: Text) -> None:  # never called: partial is False
        self.line(text)


@dataclass
class RunningTool:
    call_id: str
    tool: str
    started: datetime
    progress: float | None = None
    total: float | None = None
    message: str | None = None
    elapsed_ms: int | None = None
    """The elapsed time the tool's last progress event reported (the worker's clock)."""
    seen: float = field(default_factory=time.monotonic)
    """When that report arrived here."""
    spinner: Spinner = field(default_factory=lambda: Spinner("dots", style="cyan"))

    def elapsed(self, now: datetime | None = None) -> float:
        if self.elapsed_ms is not None:
            return self.elapsed_ms / 1000 + time.monotonic() - self.seen
        started = self.started if self.started.tzinfo else self.started.replace(tzinfo=UTC)
        return max(0.0, ((now or datetime.now(UTC)) - started).total_seconds())


@dataclass
class _Mark:
    """Where the attempt being streamed began: what a superseded attempt takes back."""

    attempt: tuple[str | None, int | None, int]
    """Its (turn, step, attempt)."""
    rows: int
    """The sink's row count before its first line."""
    asides: list[Text] = field(default_factory=list)
    """Aside lines printed since (on a terminal): printed again after the take-back, which erases them."""


@dataclass
class _Stream:
    attempt: int
    shown: int = 0
    """How many characters of this attempt's text are on the screen."""


def _elapsed(seconds: float) -> str:
    return f"{seconds:.1f}s" if seconds < 60 else f"{int(seconds // 60)}m{int(seconds % 60):02d}s"


class LiveView:
    """Renders one session's events; `region()` is what a live display shows below the printed lines."""

    def __init__(
        self, sink: Sink, session_id: str = "SESSION", *, on_change: Callable[[], None] | None = None
    ) -> None:
        self.sink = sink
        self.session_id = session_id
        self.on_change = on_change or (lambda: None)
        self.tail = Text()
        self.open: str | None = None
        """The kind of text on the unfinished line ("text" or "thinking"), None when at a line start."""
        self.streams: dict[tuple[str | None, int | None, str], _Stream] = {}
        self.superseded: set[tuple[str | None, int | None, int | None]] = set()
        self.mark: _Mark | None = None
        """The attempt whose text is being streamed and where it began; None once anything but its
        text and asides was printed."""
        self.tools: dict[str, RunningTool] = {}
        self.approvals: dict[str, Event] = {}
        self.running = False
        """A turn runs (between turn_started and its end)."""
        self.streaming = False
        """The current step has streamed text: the spinner waits until the next step or tool."""
        self.closed = False
        self._spinner = Spinner(
            "dots", Text(WAITING, "dim"), style="cyan"
        )  # one object: its frame follows the clock

    # -- input ---------------------------------------------------------------------------------

    def feed(self, event: Event) -> None:
        k = event.kind
        if k in ("text_delta", "thinking_delta"):
            self._delta(event, "text" if k == "text_delta" else "thinking")
        elif k == "attempt_superseded":
            self._superseded(event)
        elif k == "tool_progress":
            self._progress(event)
        elif k == "model_text":
            self._model_text(event)
        else:
            self._durable(event)
        self.on_change()

    def _delta(self, event: Event, kind: str) -> None:
        key = (event.turn_id, event.step, kind)
        attempt = event.attempt or 0
        if (event.turn_id, event.step, attempt) in self.superseded:
            return
        stream = self.streams.get(key)
        if stream is None or attempt > stream.attempt:
            if stream is not None and stream.shown:  # a newer attempt without a word about the old one
                self._restarted((event.turn_id, event.step, stream.attempt))
            stream = self.streams[key] = _Stream(attempt)
            if self.mark is None or self.mark.attempt != (event.turn_id, event.step, attempt):
                self.end_line()
                self.mark = _Mark((event.turn_id, event.step, attempt), self.sink.rows)
        elif attempt < stream.attempt:
            return
        text, index = event.text or "", event.index or 0
        skip = stream.shown - index  # a delta seen before (a reconnect): show only what is new
        if skip >= len(text):
            return
        stream.shown = index + len(text)
        self.streaming = True
        self._write(text[max(skip, 0) :], kind)

    def _superseded(self, event: Event) -> None:
        attempt = (event.turn_id, event.step, event.attempt or 0)
        self.superseded.add(attempt)
        shown = False
        for kind in ("text", "thinking"):
            key = (event.turn_id, event.step, kind)
            stream = self.streams.get(key)
            if stream is not None and stream.attempt == (event.attempt or 0):
                shown = shown or stream.shown > 0
                del self.streams[key]
        if shown:
            self._restarted(attempt)
        self.streaming = False

    def _restarted(self, attempt: tuple[str | None, int | None, int]) -> None:
        """Take back `attempt`'s text where the sink can, else say the answer restarts."""
        mark, self.mark = self.mark, None
        if mark is not None and mark.attempt == attempt and self.sink.take_back(self.sink.rows - mark.rows):
            self.tail, self.open = Text(), None  # the unfinished line was only in the live region
            for aside in mark.asides:  # erased with the attempt's rows: they stay, its text goes
                self.sink.line(aside)
            return
        self.end_line()
        self.sink.line(Text(RESTARTED, "dim"))

    def _progress(self, event: Event) -> None:
        tool = self.tools.get(event.call_id or "")
        if tool is None:
            return
        message_changed = event.text is not None and event.text != tool.message
        tool.progress, tool.total = event.progress, event.total
        tool.message = event.text if event.text is not None else tool.message
        if event.duration_ms is not None:
            tool.elapsed_ms, tool.seen = event.duration_ms, time.monotonic()
        if (
            self.sink.partial and message_changed
        ):  # plain output: no live line, so a line when it says something new
            self.end_line()
            self.sink.line(Text(inert(f"  .. {tool.tool}: {tool.message}{_fraction(tool)}")))

    def _model_text(self, event: Event) -> None:
        self.mark = None
        stream = self.streams.get((event.turn_id, event.step, "text"))
        text = event.text or ""
        rest = text[stream.shown :] if stream is not None else text
        if rest:
            self._write(rest, "text")
        if stream is not None:
            stream.shown = len(text)
        self.end_line()
        self.streaming = False

    def _durable(self, event: Event) -> None:
        k = event.kind
        aside = not self.sink.partial and k in ASIDES
        if not aside:
            self.end_line()
            self.mark = None
        if k == "turn_started":
            self.running, self.streaming = True, False
        elif k == "tool_call_started" and event.call_id:
            self.tools[event.call_id] = RunningTool(event.call_id, event.tool or "", event.at)
            self.streaming = False
        elif k == "tool_call_finished":
            self.tools.pop(event.call_id or "", None)
        elif k == "approval_requested" and event.call_id:
            self.approvals[event.call_id] = event
        elif k == "approval_resolved":
            self.approvals.pop(event.call_id or "", None)
            if (answered := self.tools.get(event.call_id or "")) is not None:
                answered.started = event.at  # the tool runs from the answer: the wait was not its time
        elif k in ("turn_finished", "session_closed"):
            self.running, self.streaming = False, False
            self.tools.clear()
            self.approvals.clear()
            self.closed = k == "session_closed"
        line = event_line(event, self.session_id)
        if line is not None:
            self.sink.line(line)
            if aside and self.mark is not None:
                self.mark.asides.append(line)

    # -- output --------------------------------------------------------------------------------

    def _write(self, text: str, kind: str) -> None:
        if self.open is not None and self.open != kind:
            self.end_line()
        self.open = kind
        styled = Text(inert(text), "dim" if kind == "thinking" else "")
        if self.sink.partial:
            self.sink.chunk(styled)
            if text.endswith("\n"):
                self.open = None
            return
        self.tail.append_text(styled)
        *done, self.tail = self.tail.split("\n", allow_blank=True)
        for line in done:
            self.sink.line(line)
        width = getattr(getattr(self.sink, "console", None), "width", 80)
        while len(self.tail) > TAIL_ROWS * width:  # a long paragraph: print what fills whole rows
            cut = self.tail.plain.rfind(" ", 0, (TAIL_ROWS - 1) * width) + 1 or (TAIL_ROWS - 1) * width
            head, self.tail = self.tail[:cut], self.tail[cut:]
            self.sink.line(head)
        if not self.tail:
            self.open = None

    def note(self, text: Text) -> None:
        """A line of the caller's own (not the session's), after the unfinished one: text above it
        can no longer be taken back."""
        self.end_line()
        self.mark = None
        self.sink.line(text)

    def end_line(self) -> None:
        """Finish the unfinished line of streamed text, if any."""
        if self.open is None:
            return
        if self.sink.partial:
            self.sink.chunk(Text("\n"))
        elif self.tail:
            self.sink.line(self.tail)
        self.tail, self.open = Text(), None

    @property
    def waiting(self) -> bool:
        """The model has been asked and has not answered yet (the spinner shows)."""
        return self.running and not self.streaming and not self.tools and not self.approvals

    def region(self) -> RenderableType:
        """The live bottom region: the unfinished line, the spinner, the running tools."""
        rows: list[RenderableType] = []
        if self.tail:
            rows.append(self.tail)
        if self.waiting:
            rows.append(self._spinner)
        if self.tools:
            table = Table.grid(padding=(0, 1))
            now = datetime.now(UTC)
            for tool in self.tools.values():
                bar: RenderableType = ""
                if tool.progress is not None:
                    bar = ProgressBar(
                        total=tool.total, completed=tool.progress, width=20, pulse=tool.total is None
                    )
                message = Text(inert((tool.message or "") + _fraction(tool)), "dim")
                name = Text(inert(tool.tool), "cyan")
                if tool.call_id in self.approvals:  # not running yet: no clock
                    table.add_row(tool.spinner, name, Text("waits for approval", "yellow"), bar, message)
                    continue
                table.add_row(tool.spinner, name, Text(_elapsed(tool.elapsed(now)), "dim"), bar, message)
            rows.append(table)
        return Group(*rows)


def _fraction(tool: RunningTool) -> str:
    if tool.progress is None:
        return ""
    if tool.total:
        return f" ({tool.progress:g}/{tool.total:g})"
    return f" ({tool.progress:g})"


def event_line(event: Event, session_id: str = "SESSION") -> Text | None:
    """A durable event as one styled line (None: nothing to show). Session data is made inert."""
    k = event.kind
    text, tool, call = inert(event.text or ""), inert(event.tool or ""), inert(event.call_id or "")
    args = inert(json.dumps(event.args))
    sid = inert(session_id)
    if k == "turn_started":
        return Text(f"> {text}", "bold")
    if k == "model_text":
        return Text(f"[{inert(event.model)}] {text}" if event.model else text)
    pad = "    " if event.parent else "  "  # a code-mode script's calls sit under its run_code
    if k == "tool_call_started":
        return Text(f"{pad}-> {tool}({args})", "cyan")
    if k == "tool_call_finished":
        result = inert((event.text or "").replace("\n", " ")[:120])
        colour = "green" if event.outcome == "success" else "red"
        return Text(f"{pad}<- {tool} {event.outcome} in {event.duration_ms} ms: {result}", colour)
    if k == "tool_call_cut":
        return Text(f"{pad}!! {tool} ({call}): {text}", "yellow")
    if k == "turn_finished":
        usage = event.usage
        tokens = f", {usage.total_tokens} tokens, {usage.tool_calls} tool calls" if usage else ""
        return Text(f"turn {event.outcome}{tokens}", "dim")
    if k == "approval_requested":
        return Text(
            f"  ? {tool}({args}) waits for approval: wolf approve {sid} {call} | wolf deny {sid} {call}",
            "bold yellow",
        )
    if k == "approval_resolved":
        return Text(f"  {tool} {event.outcome}{': ' + text if text else ''}", "yellow")
    if k == "child_started":
        return Text(f"  => {tool} ({call}): {inert((event.text or '')[:120])}", "magenta")
    if k == "child_finished":
        return Text(f"  <= {tool} {event.outcome}: {inert((event.text or '')[:120])}", "magenta")
    if k in ("error", "limit_reached", "interrupted"):
        return Text(f"{k.replace('_', ' ')}: {text}", "red")
    if k in ("text_delta", "thinking_delta", "attempt_superseded", "tool_progress"):
        return None
    if k == "session_closed":
        return Text(f"session closed{f' ({inert(event.outcome)})' if event.outcome else ''}", "dim")
    if k == "compiled" and f"model {DEMO_MODEL}" in text:
        return Text(f"  {text}\n  {DEMO_NOTE}", "dim")
    prose = {
        "compiled": "",
        "context_compacted": "",
        "steer_applied": "steered: ",
        "limit_warning": "warning: ",
        "config_changed": "config changed: ",
        "extensions_changed": "tools or skills changed: ",
        "command_expanded": f"{tool} expanded: ",
        "agent_resumed": f"{tool} resumed: ",
        "rate_limited": "waiting: ",
    }
    return Text(f"  {prose.get(k, k + ': ')}{text}", "dim")


def is_end(event: Event, until_turn_end: bool) -> bool:
    return event.kind == "session_closed" or (until_turn_end and event.kind == "turn_finished")


async def follow(
    events: AsyncIterator[tuple[int, Event]],
    console: Console,
    session_id: str,
    *,
    as_json: bool = False,
    until_turn_end: bool = False,
    live: bool | None = None,
) -> None:
    """Print a session's events until it closes (or its turn ends, `until_turn_end`).

    `live` (default: the console is a terminal): a spinner and tool lines in a rich `Live` region."""
    if as_json:
        async for offset, event in events:
            console.file.write(json_line(offset, event) + "\n")
            console.file.flush()
            if is_end(event, until_turn_end):
                return
        return
    if live is None:
        live = console.is_terminal
    if not live:
        view = LiveView(PlainSink(console.file), session_id)
        async for _, event in events:
            view.feed(event)
            if is_end(event, until_turn_end):
                break
        view.end_line()
        return
    view = LiveView(ConsoleSink(console), session_id)
    with Live(
        console=console,
        get_renderable=view.region,
        transient=True,
        refresh_per_second=10,
        redirect_stdout=False,
    ):
        async for _, event in events:
            view.feed(event)
            if is_end(event, until_turn_end):
                break
        view.end_line()
