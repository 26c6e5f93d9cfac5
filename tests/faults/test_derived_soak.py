"""The derived-state soak, short, as CI runs it (tests/soaks/derived_soak.py): eight queues fed by
long-lived producers for 100 s, three runners, a Sentinel group of its own flushed, restarted
empty and failed over (each at least once, 12-20 s apart); nothing lost, run twice or early,
no rolled-back or replaced-away job run, every due job started within its documented bound."""

from __future__ import annotations

import pytest

from tests.faults.test_soak import counts, run_summary
from tests.support.topologies import need_servers

pytestmark = pytest.mark.slow


def test_short_derived_soak_keeps_every_job_through_redis_losses(mariadb_url):
    need_servers("redis-server", "redis-cli")
    summary = run_summary(
        *("tests.soaks.derived_soak", "--window", "100", "--every", "12:20"),
        *("--max-seconds", "60", "--database-url", f"{mariadb_url}_dsoak"),
    )

    found = counts(summary)
    assert all(int(found[kind]) >= 1 for kind in ("flushall", "restart-empty", "sentinel-failover"))
    assert (found["lost"], found["twice"], found["early"], found["too_late"]) == ("0",) * 4
    assert (found["bad"], found["runner_exits"], found["runner_crashes"]) == ("0",) * 3
    assert int(found["rolled_back"]) > 0 and found["stuck_probes"] == "0"
