"""The usage page's chart: what the tenant's sessions spent per hour or per day, stacked by agent,
model or session, drawn on the server as inline SVG (no chart library, nothing to load, no script).

A session counts its spending in totals, not per request, so its whole spending is drawn at the hour
or day its current run started: the sessions a range covers are those `wolf usage --since <its
start>` counts, and the bars add up to that report's totals."""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass
from datetime import datetime, timedelta

from agentwolf.client.usage import Spending, UsageKey, parts
from agentwolf.workflows.types import Usage


@dataclass(frozen=True)
class Range:
    name: str
    label: str
    span: timedelta
    step: timedelta
    """One bar's time."""

    def start(self, now: datetime) -> datetime:
        """The first bar's start: whole hours (or days) back from the current one."""
        floor = now.replace(minute=0, second=0, microsecond=0)
        if self.step >= timedelta(days=1):
            floor = floor.replace(hour=0)
        return floor + self.step - self.span


HOUR, DAY = timedelta(hours=1), timedelta(days=1)
RANGES = (
    Range("24h", "24 hours", 24 * HOUR, HOUR),
    Range("7d", "7 days", 7 * DAY, DAY),
    Range("30d", "30 days", 30 * DAY, DAY),
)
DEFAULT_RANGE = RANGES[1]

WIDTH, HEIGHT, AXIS = 720.0, 220.0, 24.0
"""The drawing's units (it scales to the page's width); AXIS: room under the bars for the dates."""
PALETTE = ("#0b5cad", "#c25e00", "#1d7a43", "#a4261d", "#6a4fb0", "#7a6a00")
"""One colour per group shown (each 3:1 or more against white, as WCAG asks of graphics)."""
OTHERS, OTHERS_COLOR = "others", "#6e7781"


@dataclass(frozen=True)
class Segment:
    """One group's part of one bar."""

    x: float
    y: float
    width: float
    height: float
    color: str
    group: str
    when: str
    usage: Usage


@dataclass(frozen=True)
class Tick:
    x: float
    """Where its bar begins (the label starts there)."""
    label: str


@dataclass(frozen=True)
class Chart:
    range: Range
    since: datetime
    measure: str
    """"USD" when any request was priced, else "tokens"."""
    segments: list[Segment]
    ticks: list[Tick]
    legend: list[tuple[str, str]]
    """(group, colour), the largest first."""
    top: str
    """The tallest bar's value, as the axis labels it."""
    width: float = WIDTH
    height: float = HEIGHT
    plot: float = HEIGHT - AXIS


def chart(spending: list[Spending], by: UsageKey, range_: Range, since: datetime) -> Chart:
    """Bars from `since` on, one per `range_.step`, each stacked by the `by` groups (the six largest
    by name, the rest as "others")."""
    count = round(range_.span / range_.step)
    cells: dict[tuple[int, str], Usage] = defaultdict(Usage)
    totals: dict[str, Usage] = defaultdict(Usage)
    for spent in spending:
        if spent.counters is None:
            continue
        bar = min(count - 1, max(0, int((spent.execution.start_time - since) / range_.step)))
        for key, usage in parts(spent.execution, spent.counters, by):
            cells[bar, key] = cells[bar, key].plus(usage)
            totals[key] = totals[key].plus(usage)
    order = sorted(totals, key=lambda k: (-totals[k].spent, -totals[k].total_tokens, k))
    named = order[: len(PALETTE)]
    colors = dict(zip(named, PALETTE, strict=False))
    stacked: dict[tuple[int, str], Usage] = defaultdict(Usage)
    for (bar, key), usage in cells.items():
        group = key if key in colors else OTHERS
        stacked[bar, group] = stacked[bar, group].plus(usage)
    priced = any(u.cost_usd for u in totals.values())

    def value(usage: Usage) -> float:
        return usage.spent if priced else usage.total_tokens

    heights: dict[int, float] = defaultdict(float)
    for (bar, _), usage in stacked.items():
        heights[bar] += value(usage)
    top = max(heights.values(), default=0) or 1
    slot, plot = WIDTH / count, HEIGHT - AXIS
    legend = [(g, colors[g]) for g in named] + ([(OTHERS, OTHERS_COLOR)] if len(order) > len(named) else [])
    segments, filled = [], dict.fromkeys(range(count), 0.0)
    for group, color in legend:  # the largest group at the bottom of every bar
        for bar in range(count):
            if (bar, group) not in stacked:
                continue
            usage = stacked[bar, group]
            height = plot * value(usage) / top
            filled[bar] += height
            segments.append(
                Segment(
                    x=round(bar * slot + slot * 0.15, 2),
                    y=round(plot - filled[bar], 2),
                    width=round(slot * 0.7, 2),
                    height=round(height, 2),
                    color=color,
                    group=group,
                    when=_label(since + bar * range_.step, range_, full=True),
                    usage=usage,
                )
            )
    every = -(-count // 8)  # at most eight dates under the bars
    ticks = [
        Tick(round(bar * slot + slot * 0.15, 2), _label(since + bar * range_.step, range_, full=False))
        for bar in range(0, count, every)
    ]
    measure = "USD" if priced else "tokens"
    return Chart(range_, since, measure, segments, ticks, legend, f"{top:.4f}" if priced else f"{int(top):,}")


def _label(at: datetime, range_: Range, *, full: bool) -> str:
    if range_.step < DAY:
        return at.strftime("%Y-%m-%d %H:00") if full else at.strftime("%H:00")
    return at.strftime("%Y-%m-%d") if full else at.strftime("%m-%d")
