"""What the workloads that compare servers share (topologies.py, Redis's; databases.py,
MySQL's): rounds that take turns going first, as the machine is noisy; each ratio the median
of the rounds' own, both drains of a round run back to back, which a load lasting a round
moves less than it moves either; and the figures they report."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from .report import median, number


@dataclass
class Rounds:
    """Each drain's wall and CPU seconds, and each stream's lateness summary, by name."""

    walls: dict[str, list[float]] = field(default_factory=dict)
    cpus: dict[str, list[float]] = field(default_factory=dict)
    late: dict[str, list[dict[str, float]]] = field(default_factory=dict)

    def drained(self, name: str, wall: float, cpu: float) -> None:
        self.walls.setdefault(name, []).append(wall)
        self.cpus.setdefault(name, []).append(cpu)

    def streamed(self, name: str, summary: dict[str, float]) -> None:
        self.late.setdefault(name, []).append(summary)

    def rates(self, n: int) -> dict[str, float]:
        """Jobs/s of each name's median drain of `n` jobs."""
        return {name: n / median(values) for name, values in self.walls.items()}


def turns(attempt: int, names: list[str]) -> list[str]:
    """`names` rotated by the attempt, so that none always goes first."""
    shift = attempt % len(names)
    return names[shift:] + names[:shift]


def paired(values: dict[str, list[float]], plain: str, other: str) -> float:
    """`plain` / `other` in each round, and the median of those: a ratio of rates from
    walls (or CPU seconds)."""
    pairs = zip(values[plain], values[other], strict=True)
    return median([first / second for first, second in pairs])


def lateness_words(late: dict[str, dict[str, float]]) -> str:
    return "lateness p50/p99/max: " + ", ".join(
        f"{name} {number(f['p50_ms'])}/{number(f['p99_ms'])}/{number(f['max_ms'])} ms"
        for name, f in late.items()
    )


def figures(
    n: int,
    rounds: Rounds,
    ratios: dict[str, float],
    cpu_ratios: dict[str, float],
    late: dict[str, dict[str, float]],
) -> dict[str, Any]:
    return {
        "n": n,
        "jobs_per_s": rounds.rates(n),
        "wall_s": rounds.walls,
        "cpu_s": rounds.cpus,
        "vs_plain": ratios,
        "cpu_vs_plain": cpu_ratios,
        "lateness": late,
    }


def early_or_missed(late: dict[str, dict[str, float]]) -> float:
    return sum(f["early"] + f["missing"] for f in late.values())
