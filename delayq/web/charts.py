"""The overview's charts: jobs finished and their lateness (p50, p99) over the last hour (60
bins of a minute) or day (48 of half an hour), drawn as SVG on the server from the per-minute
aggregates. Classes give the colours, no style attribute, so the page's CSP holds."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timezone

from ..ops.minutes import Minute, merge

WINDOWS = {"hour": (60, 1), "day": (1440, 30)}  # name: (minutes read, minutes per bin)
WIDTH = 600.0
HEIGHT = 120.0


@dataclass(frozen=True)
class Bin:
    """What the jobs of one bin did, as the charts draw it."""

    start: float
    finished: int
    failed: int
    p50: float | None
    p99: float | None


@dataclass(frozen=True)
class Bar:
    x: float
    y: float
    width: float
    height: float
    label: str


@dataclass(frozen=True)
class Chart:
    """One chart's shapes in a WIDTH × HEIGHT box, and its largest value for the axis."""

    bars: list[Bar]
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
    merged = [(first + span * slot, merge(grouped[slot])) for slot in sorted(grouped)]
    return [
        Bin(start, total.succeeded + total.failed, total.failed, *_quantiles(total))
        for start, total in merged
    ]


def throughput_chart(bins: list[Bin]) -> Chart:
    """A bar per bin, as tall as the jobs that finished in it."""
    top = float(max((item.finished for item in bins), default=0)) or 1.0
    step = WIDTH / max(len(bins), 1)
    bars = [
        Bar(
            x=round(index * step, 1),
            y=round(HEIGHT - HEIGHT * item.finished / top, 1),
            width=round(max(step - 1, 1), 1),
            height=round(HEIGHT * item.finished / top, 1),
            label=f"{_label(item.start)}: {item.finished} finished, {item.failed} failed",
        )
        for index, item in enumerate(bins)
    ]
    return Chart(bars, {}, top)


def lateness_chart(bins: list[Bin]) -> Chart:
    """Lines of each bin's p50 and p99 lateness; bins without jobs leave gaps in neither."""
    values = [value for item in bins for value in (item.p50, item.p99) if value is not None]
    top = max(values, default=0.0) or 1.0
    step = WIDTH / max(len(bins), 1)
    lines = {
        name: " ".join(
            f"{index * step + step / 2:.1f},{_y(value, top):.1f}"
            for index, item in enumerate(bins)
            if (value := getattr(item, name)) is not None
        )
        for name in ("p50", "p99")
    }
    bars = [
        Bar(
            x=round(index * step, 1),
            y=0.0,
            width=round(max(step, 1), 1),
            height=HEIGHT,
            label=f"{_label(item.start)}: p50 {_ms(item.p50)}, p99 {_ms(item.p99)}",
        )
        for index, item in enumerate(bins)
        if item.p99 is not None
    ]
    return Chart(bars, lines, top)


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
