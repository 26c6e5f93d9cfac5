"""`python -m bench --only flow` end to end at its quick size, on a Redis of its own and a
database of the suite's: every mode drains its jobs and reports its figures. No figure's
size is asserted, only that each is there."""

from __future__ import annotations

from pathlib import Path

from tests.support.benches import run_quick


def test_flow_drains_every_mode_and_reports_each_figure(mariadb_url: str, tmp_path: Path) -> None:
    figures = run_quick("flow", f"{mariadb_url}_flow", tmp_path)["figures"]

    for mode in ("none", "rate", "concurrency", "locks"):
        assert figures[f"{mode}_jobs_per_s"] > 0
        assert figures[f"{mode}_redis_commands_per_job"] >= 0
    assert figures["rate_vs_limit"] > 0
