"""The failover soak, short, as CI runs it (tests/soaks/failover_soak.py): a few hundred jobs over
four queues, two runners of `-c 8 -p 2` and a producer, through one failover of each kind
on a Sentinel group and on a Cluster of its own; nothing lost, nothing run twice, every id
the producer got run, each runner going on within down-after + 3 s of each promotion."""

from __future__ import annotations

import pytest

from tests.faults.test_soak import counts, run_summary
from tests.support.topologies import need_servers

pytestmark = pytest.mark.slow


# The window holds one failover of each kind: every 8 s after the last settled, which takes
# up to 16 s (a SENTINEL FAILOVER waits for the old primary's demotion).
@pytest.mark.parametrize(
    ("topology", "window", "faults"),
    [
        ("sentinel", 70, ("sentinel-failover", "kill-9-primary", "sigstop-primary")),
        ("cluster", 40, ("cluster-failover", "kill-9-master")),
    ],
)
def test_short_failover_soak_loses_nothing_and_runs_nothing_twice(
    mariadb_url, topology, window, faults
):
    need_servers("redis-server", "redis-cli")
    summary = run_summary(
        *("tests.soaks.failover_soak", "--topology", topology, "--jobs", "300"),
        *("--window", str(window), "--every", "8", "--max-seconds", "60"),
        *("--database-url", f"{mariadb_url}_soak"),
    )

    found = counts(summary)
    assert all(int(found.get(kind, 0)) >= 1 for kind in faults), summary
    assert (found["lost"], found["duplicates"], found["unexplained_duplicates"]) == ("0",) * 3
    assert int(found["produced"]) > 0 and found["producer_ids_not_run"] == "0"
    assert (found["errors_written"], found["runner_crashes"], found["stuck_queues"]) == ("0",) * 3
