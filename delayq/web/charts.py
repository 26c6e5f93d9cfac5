"""The overview's charts: jobs finished (succeeded and failed, stacked) and their lateness
(p50, p99) over the last hour (60 bins of a minute) or day (48 of half an hour), on one time
axis, drawn as SVG on the server from the per-minute aggregates. Classes give the colours, no
style attribute, so the page's CSP holds."""

from __future__ import annotations

import math
from dataclasses import dataclass
from datetime import datetime, timezone

from ..ops.minutes import Minute, merge

WINDOWS = {"hour": (60, 1), "day": (1440, 30)}  # name: (minutes read, minutes per bin)
TICKS = {"hour": 600, "day": 3 * 3600}  # seconds between the time axis's marks
WIDTH = 600.0
HEIGHT = 120.0
AXIS = 18.0  # below the HEIGHT of bars: the time axis's labels
EDGE = 16.0  # a tick this near an end has its text start or end there, not centred


@dataclass(frozen=True)
class Bin:
    """What the jobs of one bin did, as the charts draw it."""

    start: float
    finished: int
    failed: int
    p50: float | None
    p99: float | None


@dataclass(frozen=True)
class Part:
    """One rectangle of a column, its class the colour: succeeded, failed, or hover."""

    kind: str
    y: float
    height: float


@dataclass(frozen=True)
class Column:
    """One bin's place on a chart, with its tooltip and its rectangles."""

    x: float
    width: float
    label: str
    parts: tuple[Part, ...]


@dataclass(frozen=True)
class Tick:
    """A round time of day on the time axis, where it falls; its text anchored so that it
    stays inside the chart at either end."""

    x: float
    label: str
    anchor: str = "middle"


@dataclass(frozen=True)
class Chart:
    """One chart's shapes in a WIDTH × HEIGHT box, and its largest value for the axis."""

    columns: list[Column]
    lines: dict[str, str]  # class: SVG polyline points
    top: float


def lateness_by_queue(read: list[Minute], since: float) -> dict[str, tuple[float | None, ...]]:
    """{queue: (p50, p99) of its minutes from `since` on}, for the overview's table."""
    by_queue: dict[str, list[Minute]] = {}
    for minute in read:
        if minute.start >= since:
            by_queue.setdefault(minute.queue, []).append(minute)
    return {name: _quantiles(merge(items)) for name, items in by_queue.items()}


def bins_of(read: list[Minute], window: str) -> list[Bin]:
    """The window's bins, oldest first, merged across queues."""
    span = 60 * WINDOWS[window][1]
    first = min((minute.start for minute in read), default=0.0)
    grouped: dict[int, list[Minute]] = {}
    for minute in read:
        grouped.setdefault(int((minute.start - first) // span), []).append(minute)
    merged = [(first + span * number, merge(grouped[number])) for number in sorted(grouped)]
    return [
        Bin(start, total.succeeded + total.failed, total.failed, *_quantiles(total))
        for start, total in merged
    ]


def throughput_chart(bins: list[Bin]) -> Chart:
    """A column per bin, as tall as the jobs that finished in it: those that failed (retried
    or not) stacked on those that succeeded."""
    top = float(max((item.finished for item in bins), default=0)) or 1.0
    step = WIDTH / max(len(bins), 1)
    columns = []
    for position, item in enumerate(bins):
        succeeded = round(HEIGHT * (item.finished - item.failed) / top, 1)
        failed = round(round(HEIGHT * item.finished / top, 1) - succeeded, 1)
        columns.append(
            Column(
                x=round(position * step, 1),
                width=round(max(step - 1, 1), 1),
                label=f"{_label(item.start)}: {item.finished} finished,"
                f" {item.finished - item.failed} succeeded, {item.failed} failed",
                parts=(
                    Part("succeeded", round(HEIGHT - succeeded, 1), succeeded),
                    Part("failed", round(HEIGHT - succeeded - failed, 1), failed),
                ),
            )
        )
    return Chart(columns, {}, top)


def lateness_chart(bins: list[Bin]) -> Chart:
    """Lines of each bin's p50 and p99 lateness; bins without jobs leave gaps in neither."""
    values = [value for item in bins for value in (item.p50, item.p99) if value is not None]
    top = max(values, default=0.0) or 1.0
    step = WIDTH / max(len(bins), 1)
    lines = {
        name: " ".join(
            f"{position * step + step / 2:.1f},{_y(value, top):.1f}"
            for position, item in enumerate(bins)
            if (value := getattr(item, name)) is not None
        )
        for name in ("p50", "p99")
    }
    columns = [
        Column(
            x=round(position * step, 1),
            width=round(max(step, 1), 1),
            label=f"{_label(item.start)}: p50 {_ms(item.p50)}, p99 {_ms(item.p99)}",
            parts=(Part("hover", 0.0, HEIGHT),),
        )
        for position, item in enumerate(bins)
        if item.p99 is not None
    ]
    return Chart(columns, lines, top)


def time_axis(bins: list[Bin], window: str) -> list[Tick]:
    """The round times of day (every 10 minutes over an hour, 3 hours over a day) between the
    first bin's start and the last one's end, placed where the charts draw that time."""
    if not bins:
        return []
    start, every = bins[0].start, TICKS[window]
    span = 60 * WINDOWS[window][1] * len(bins)
    ticks = []
    at = math.ceil(start / every) * every
    while at < start + span:
        x = round((at - start) / span * WIDTH, 1)
        anchor = "start" if x < EDGE else "end" if x > WIDTH - EDGE else "middle"
        ticks.append(Tick(x, _label(at).removesuffix(" UTC"), anchor))
        at += every
    return ticks


def _quantiles(total: Minute) -> tuple[float | None, ...]:
    """The p50 and p99 lateness the charts and the queues' table show."""
    return total.lateness_quantile(0.5), total.lateness_quantile(0.99)


def _label(epoch: float) -> str:
    """How a bin's start reads in a chart's tooltip: the time of day, UTC."""
    return datetime.fromtimestamp(epoch, timezone.utc).strftime("%H:%M UTC")


def _y(value: float, top: float) -> float:
    """A line's height for `value`: HEIGHT * (1 - value / top) can round to -0.0 at the top,
    which SVG takes but a reader of the points should not have to."""
    return max(0.0, min(HEIGHT - HEIGHT * value / top, HEIGHT))  # max keeps 0.0 over -0.0


def _ms(seconds: float | None) -> str:
    return "–" if seconds is None else f"{seconds * 1000:.0f} ms"
