"""The scale workload's report: each figure on the almost empty table and at depth side by
side with their ratio, the issue's target for it at depth, and one table of them for people.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from .report import Result, Target, number, ratio

WITHIN_S = 0.5  # a command at depth: at most this much slower than on the empty table
COMMANDS = (
    "status",
    "status --json",
    "list",
    "list --status failed",
    "peek",
    "show",
    "metrics",
    "run (nothing due)",
)

# (label, where the figure is in a table's figures, target): a target is None, "within"
# (depth - empty <= WITHIN_S), "ratio" (depth / empty <= 1.2), or (op, limit) at depth.
ROWS: list[tuple[str, tuple[str, ...], Any]] = [
    *[(f"{name} s", ("command_s", name), "within") for name in COMMANDS],
    ("doctor s", ("command_s", "doctor"), ("<=", 5.0)),
    # A whole pass over the table and the schedule: it takes what it takes, with progress.
    ("doctor --full s", ("command_s", "doctor --full"), None),
    ("delayq add s", ("command_s", "add"), None),
    *[(f"web {name} s", ("web_s", name), ("<=", 0.5)) for name in ("overview", "failed search")],
    ("web job page s", ("web_s", "job page"), ("<=", 0.5)),
    ("reconcile s", ("reconcile_s",), None),
    ("reconcile rows/s (table rows / s)", ("reconcile_rows_per_s",), (">=", 100_000)),
    ("  rows compared (within the horizon)", ("reconcile_rows_compared",), None),
    ("  bare SELECT rows/s", ("bare_select_rows_per_s",), None),
    ("Redis loss: first due job s", ("first_job_s",), ("<=", 5.0)),
    ("Redis loss: 2nd runner 1st job s", ("second_runner_first_job_s",), None),
    ("Redis loss: index complete s", ("index_complete_s",), None),
    ("Redis loss: index entries", ("index_entries",), None),
    ("Redis loss: index entries/s", ("index_entries_per_s",), None),
    ("Redis loss: pending rows/s to whole", ("index_pending_rows_per_s",), (">=", 200_000)),
    ("  bare ZADD entries/s", ("bare_zadd_entries_per_s",), None),
    ("purge rows deleted", ("purge_deleted",), None),
    ("purge rows/s", ("purge_rows_per_s",), (">=", 50_000)),
    ("purge: lateness p99 s", ("purge_lateness_p99_s",), ("<=", 0.5)),
    ("stream: lateness p50 s", ("lateness_p50_s",), None),
    ("stream: lateness p99 s", ("lateness_p99_s",), "ratio"),
    ("add_many jobs/s", ("add_many_jobs_per_s",), (">=", 50_000)),
    ("add_many last tenth jobs/s", ("add_many_last_tenth_jobs_per_s",), (">=", 50_000)),
    ("Redis bytes/pending job", ("redis_bytes_per_job",), ("<=", 100)),
    ("Redis bytes/schedule entry", ("redis_bytes_per_entry_loaded",), None),
    ("Redis bytes/job, rebuilt", ("redis_bytes_per_job_rebuilt",), None),
    ("runner peak RSS MiB, Redis loss", ("runner_peak_rss_mib",), None),
    ("runner peak RSS MiB, loop", ("loop_runner_peak_rss_mib",), None),
]
LATENESS_RATIO = 1.2
SERVER_NAMES = {"mariadb": "MariaDB", "sqlite": "SQLite", "redis": "Redis"}


@dataclass
class ScaleResult(Result):
    """A table of many lines rather than one line of figures."""

    def human(self) -> str:
        return self.line


def figure(figures: dict[str, Any], path: tuple[str, ...]) -> float | None:
    value: Any = figures
    for key in path:
        value = value.get(key) if isinstance(value, dict) else None
    return float(value) if isinstance(value, (int, float)) else None


def result(figures: dict[str, Any]) -> ScaleResult:
    for table in (figures["empty"], figures["depth"]):
        loaded = table.get("redis_bytes_per_job_loaded")
        table["redis_bytes_per_job"] = (
            loaded if loaded is not None else table.get("redis_bytes_per_job_rebuilt")
        )
    targets, lines = [], []
    figures["ratio"] = {}
    for label, path, bound in ROWS:
        empty, depth = figure(figures["empty"], path), figure(figures["depth"], path)
        figures["ratio"][".".join(path)] = ratio(depth, empty)
        target = _target(label, empty, depth, bound)
        if target is not None:
            targets.append(target)
        lines.append(_line(label, empty, depth, target))
    head = _head(figures)
    rule = "-" * len(lines[0])
    failed = [
        f"failed on the {name} table: {step}: {why}"
        for name, key in (("empty", "empty"), ("deep", "depth"))
        for step, why in figures[key].get("errors", {}).items()
    ]
    header = _line("figure", None, None, None, header=True)
    table = "\n".join([head, header, rule, *lines, *failed])
    return ScaleResult(table, figures, targets)


def _target(label: str, empty: float | None, depth: float | None, bound: Any) -> Target | None:
    if bound is None:
        return None
    if bound == "within":
        value = None if empty is None or depth is None else depth - empty
        return Target(f"{label} at depth - empty", value, "<=", WITHIN_S)
    if bound == "ratio":
        return Target(f"{label} at depth / empty", ratio(depth, empty), "<=", LATENESS_RATIO)
    op, limit = bound
    return Target(f"{label} at depth", depth, op, limit)


def _line(
    label: str,
    empty: float | None,
    depth: float | None,
    target: Target | None,
    header: bool = False,
) -> str:
    if header:
        return f"{label:<34} {'empty':>12} {'at depth':>12} {'ratio':>8}  target"
    shown = ratio(depth, empty)
    verdict = ""
    if target is not None:
        verdict = f"{target.op} {number(target.limit)}{_what(target)}: "
        verdict += "ok" if target.ok else ("n/a" if target.value is None else "MISS")
    return (
        f"{label:<34} {number(empty):>12} {number(depth):>12} "
        f"{'n/a' if shown is None else f'{shown:.2f}x':>8}  {verdict}"
    )


def _what(target: Target) -> str:
    if target.name.endswith("- empty"):
        return " s more than empty"
    if target.name.endswith("/ empty"):
        return "x empty"
    return ""


def _head(figures: dict[str, Any]) -> str:
    depth = figures["depth"]
    table = depth["table"]
    unavailable = ", ".join(figures.get("unavailable", [])) or "nothing"
    servers = ", ".join(f"{SERVER_NAMES[kind]} {v}" for kind, v in figures["servers"].items())
    return (
        f"scale N={figures['jobs']:,}: at depth {_rows(depth['rows'])}; "
        f"empty {_rows(figures['empty']['rows'])}; {servers}\n"
        f"table at depth: data {table['data_bytes'] / 2**20:,.0f} MiB, indexes "
        f"{table['index_bytes'] / 2**20:,.0f} MiB; {_settings(figures, table)}; "
        f"{'reused ' if figures['reused'] else ''}data in {figures['data_dir']}"
        f"{' (kept)' if figures['kept'] else ' (removed)'}; not available: {unavailable}"
    )


def _settings(figures: dict[str, Any], table: dict[str, int]) -> str:
    pool = figures["buffer_pool_bytes"]
    if pool is None:
        return str(figures.get("settings", ""))
    holds = "holds" if pool >= table["index_bytes"] else "does not hold"
    return f"InnoDB buffer pool {pool / 2**20:,.0f} MiB ({holds} the indexes)"


def _rows(counts: dict[str, int]) -> str:
    return ", ".join(f"{count:,} {status}" for status, count in counts.items())
