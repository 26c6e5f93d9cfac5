"""What a workload hands back — its human line, its figures and its targets — and the small
statistics and number formats the workloads share."""

from __future__ import annotations

import math
import statistics
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any


@dataclass(frozen=True)
class Target:
    """A figure and the bound the issue sets for it."""

    name: str
    value: float | None  # None: could not be measured
    op: str  # ">=" or "<="
    limit: float

    @property
    def ok(self) -> bool:
        if self.value is None:
            return False
        return self.value >= self.limit if self.op == ">=" else self.value <= self.limit

    def verdict(self) -> str:
        return f"{self.name} {self.op} {number(self.limit)}: {'ok' if self.ok else 'MISS'}"

    def as_json(self) -> dict[str, Any]:
        return {"value": self.value, "op": self.op, "limit": self.limit, "ok": self.ok}


@dataclass
class Result:
    line: str
    figures: dict[str, Any]
    targets: list[Target] = field(default_factory=list)

    def human(self) -> str:
        if not self.targets:
            return self.line
        return f"{self.line}  [{'; '.join(t.verdict() for t in self.targets)}]"


def median(values: Sequence[float]) -> float:
    return float(statistics.median(values))


def percentile(values: Sequence[float], fraction: float) -> float:
    """Nearest-rank percentile: the smallest value with at least `fraction` of them at or
    below it."""
    ordered = sorted(values)
    rank = max(1, math.ceil(fraction * len(ordered)))
    return ordered[rank - 1]


def ratio(numerator: float | None, denominator: float | None) -> float | None:
    if numerator is None or not denominator:
        return None
    return numerator / denominator


def number(value: float | None) -> str:
    """Figures for people: thousands separated, three significant digits below 100."""
    if value is None:
        return "n/a"
    if abs(value) >= 100:
        return f"{value:,.0f}"
    return f"{value:.3g}"


def times(value: float | None) -> str:
    return "n/a" if value is None else f"{value:.2f}x"


def rates_against_limit(rates: dict[str, float], limit: float, errors: dict[str, str]) -> str:
    """'name N/s (R limit), ...' for each worker, then which peers failed and why."""
    shown = ", ".join(
        f"{name} {number(rate)}/s ({times(ratio(rate, limit))} limit)"
        for name, rate in rates.items()
    )
    return shown + "".join(f"; {name} failed ({why})" for name, why in errors.items())
