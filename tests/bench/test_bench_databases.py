"""`python -m bench --only databases` end to end at its quick size, on a Redis of its own
and MariaDB servers of its own (a plain one, alone and behind HAProxy, an asynchronous and a
semi-synchronous primary with a replica each, a Galera cluster behind HAProxy): every way to
the table drains its jobs and runs its stream on time. No figure's size is asserted, only
that each is there and nothing ran early or went missing."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.faults.test_galera import need_galera
from tests.support.benches import run_quick


@pytest.mark.serial  # eight mariadbd of its own
def test_databases_drains_on_every_way_to_the_table_and_reports_each_figure(
    mariadb_url: str, tmp_path: Path
) -> None:
    need_galera(proxy=True)
    figures = run_quick("databases", f"{mariadb_url}_databases", tmp_path)["figures"]

    ways = {"haproxy", "async", "semisync", "galera"}
    assert set(figures["jobs_per_s"]) == ways | {"plain"}
    assert all(rate > 0 for rate in figures["jobs_per_s"].values())
    assert set(figures["vs_plain"]) == ways
    for late in figures["lateness"].values():
        assert (late["early"], late["missing"]) == (0, 0)
