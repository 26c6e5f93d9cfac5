"""The suite's own MariaDB is set up as production runs MariaDB (bin/test starts it): binary
logging on, log_bin_trust_function_creators at its default (off), the tests logged in as an
application's user granted ALL on the test databases and nothing global. There `delayq init`
may not create the triggers that keep pending counts (store/table/privileges.py): it says so in
one line, naming the setting that would allow them, and counts are read from the table.
The tests of the kept counts run on SQLite and on a second server that trusts function
creators (`with_kept_counts`); tests/faults/test_least_privilege.py tries the other grants."""

from __future__ import annotations

import pytest

from delayq import JobSpec
from delayq.store.table import counts
from delayq.store.table.counts import Counts
from tests.conftest import _missing, mysql_connect
from tests.support.invoke import invoke

H = "tests.sample_handlers.jobs"


def rows(url: str, sql: str) -> list[tuple[object, ...]]:
    conn = mysql_connect(url)
    try:
        with conn.cursor() as cursor:
            cursor.execute(sql)
            return list(cursor.fetchall())
    finally:
        conn.close()


@pytest.fixture
def production_server(mariadb_url: str, mariadb_admin_url: str) -> str:
    """The suite's MariaDB URL, once its server and user are seen to be set up as production
    runs them (elsewhere than in CI a developer's DELAYQ_TEST_MARIADB_URL may name another)."""
    ((binlog, trusted),) = rows(
        mariadb_admin_url, "SELECT @@log_bin, @@log_bin_trust_function_creators"
    )
    grants = [str(grant) for (grant,) in rows(mariadb_url, "SHOW GRANTS")]
    global_grants = [grant for grant in grants if " ON *.* " in grant]
    if (int(binlog), int(trusted)) != (1, 0) or any(
        not grant.startswith("GRANT USAGE ON *.* ") for grant in global_grants
    ):
        _missing(
            f"the suite's MariaDB is not set up as production runs it (log_bin {binlog}, "
            f"log_bin_trust_function_creators {trusted}, grants {grants}); bin/test starts one"
        )
    return mariadb_url


@pytest.mark.parametrize("backend", ["mariadb"], indirect=True)
def test_init_as_the_suites_user_keeps_no_trigger_counts_says_why_and_counts_stay_exact(
    production_server, queue, cli_env, log
):
    result = invoke(cli_env, "init")

    assert result.exit_code == 0, result.output
    (said,) = [line for line in result.stdout.splitlines() if counts.WITHOUT_TRIGGERS in line]
    assert "set log_bin_trust_function_creators=1 on the server" in said
    assert not Counts(queue.table).installed()
    tables = {name for (name,) in rows(production_server, "SHOW TABLES")}
    assert counts.COUNTS_TABLE not in tables  # nothing half made
    queue.add_many([JobSpec(H, "record", {"log": log}, delay=60) for _ in range(3)])
    queue.add(H, "record", {"log": log}, queue="mail", delay=7200)  # beyond the horizon
    assert Counts(queue.table).pending_by_queue() == {"default": 3, "mail": 1}
    assert queue.status()["queues"]["mail"]["pending"] == 1
    (doctor,) = [
        line.split(None, 2)
        for line in invoke(cli_env, "doctor").stdout.splitlines()
        if line.split(None, 2)[1:2] == ["counts"]
    ]
    assert doctor[0] == "warn"
    assert doctor[2].startswith(counts.WITHOUT_TRIGGERS)
    assert "log_bin_trust_function_creators=1" in doctor[2]
