"""`python -m bench --only enqueue` end to end at its quick size, on a Redis of its own and a
database of the suite's: each way of adding (`q.add`, `q.add_many`, `aq.add`, the baseline's
INSERT + ZADD) writes every row and its schedule entry — the workload counts both after each
and fails on a shortfall — and reports its figures. No figure's size is asserted."""

from __future__ import annotations

from pathlib import Path

from tests.support.benches import run_quick


def test_enqueue_writes_each_job_and_its_entry_and_reports_every_path(
    mariadb_url: str, tmp_path: Path
) -> None:
    figures = run_quick("enqueue", f"{mariadb_url}_enqueue", tmp_path)["figures"]

    assert figures["errors"] == {}
    for path in ("add", "add_many", "async_add", "baseline"):
        assert figures[f"{path}_jobs_per_s"] > 0
