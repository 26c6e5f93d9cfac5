"""The short chaos soak, as CI runs it: a few hundred jobs, random kill -9, FLUSHDB, killed
MariaDB connections and a table locked past the lease (and, in the second, Redis restarts),
over plain, recurring, debounced and hostile jobs; nothing lost, duplicates within the
faults' bound, every queue still moving, no runner exiting.

Its Redis is the database DELAYQ_SOAK_REDIS_URL names; by default the one just below
DELAYQ_TEST_REDIS_URL's on its server, 14 for 15 (the soak flushes it). The second soak runs
a redis-server of its own on a free port, so that it may kill it."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from urllib.parse import urlsplit

import pytest

from tests.conftest import IN_CI, REDIS_URL, ROOT

pytestmark = pytest.mark.slow


def soak_redis_url() -> str:
    """DELAYQ_SOAK_REDIS_URL, or the database just below the suite's own test database on
    its server (14 by default); never the suite's own, which the soak would flush and leave
    keys in."""
    explicit = os.environ.get("DELAYQ_SOAK_REDIS_URL")
    below = int(urlsplit(REDIS_URL).path.strip("/") or 0) - 1
    url = explicit or urlsplit(REDIS_URL)._replace(path=f"/{below}").geturl()
    if url == REDIS_URL:
        pytest.fail(
            f"the soak would flush DELAYQ_TEST_REDIS_URL's database ({url}); point "
            "DELAYQ_SOAK_REDIS_URL at another one",
            pytrace=False,
        )
    return url


def run_soak(mariadb_url: str, *options: str) -> str:
    """A short soak on a database named after the test database, so suites run side by side
    on one server (each with its own DELAYQ_TEST_MARIADB_URL) do not drop each other's soak
    table; its summary line, asserted OK."""
    return run_summary(
        *("tests.soaks.soak", "--jobs", "300", "--window", "12"),
        *("--max-seconds", "120", "--database-url", f"{mariadb_url}_soak"),
        *("--redis-url", soak_redis_url(), *options),
    )


def run_summary(*module_and_options: str) -> str:
    """`python -m` a soak from the repository; its summary line, asserted OK."""
    result = subprocess.run(
        [sys.executable, "-m", *module_and_options],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=240,
    )
    summary = result.stdout.strip().splitlines()[-1] if result.stdout.strip() else result.stderr
    assert result.returncode == 0, summary + "\n" + result.stderr[-3000:]
    assert " lost=0 " in summary and summary.endswith("OK"), summary
    return summary


def counts(summary: str) -> dict[str, str]:
    return dict(word.split("=", 1) for word in summary.split() if "=" in word)


def test_short_soak_loses_nothing_and_duplicates_no_more_than_it_killed(mariadb_url):
    summary = counts(run_soak(mariadb_url, "--runners", "3"))

    assert int(summary["stalls"]) >= 1 and int(summary["flushes"]) >= 1
    assert summary["series_ok"] == summary["series"] and int(summary["series_runs"]) > 0
    assert summary["debounce_ok"] == summary["debounced"]
    assert summary["hostile_ok"] == summary["hostile"] == "7"
    assert (summary["stuck_queues"], summary["runner_crashes"]) == ("0", "0")


def test_short_soak_with_processes_async_handlers_and_redis_restarts(mariadb_url):
    if shutil.which("redis-server") is None:
        message = "redis-server is not installed; bin/test installs it"
        pytest.fail(message) if IN_CI else pytest.skip(message)
    summary = counts(
        run_soak(
            mariadb_url,
            *("--runners", "2", "--processes", "2", "--concurrency", "8"),
            *("--async-share", "0.5", "--redis-restarts"),
        )
    )

    assert (summary["processes"], summary["concurrency"], summary["async_share"]) == (
        "2",
        "8",
        "0.5",
    )
    assert int(summary["redis_restarts"]) >= 1 and int(summary["stalls"]) >= 1
    assert summary["hostile_ok"] == summary["hostile"]
    assert summary["queues"] == "4" and summary["stuck_queues"] == "0"
