"""The short chaos soak, as CI runs it: a few hundred jobs, three runners, random kill -9,
FLUSHDB and killed MariaDB connections; nothing lost, duplicates within the kills."""

from __future__ import annotations

import subprocess
import sys

import pytest

from tests.conftest import ROOT

pytestmark = pytest.mark.slow


def run_soak(mariadb_url: str, *options: str) -> str:
    """A short soak on a database named after the test database, so suites run side by side
    on one server (each with its own DELAYQ_TEST_MARIADB_URL) do not drop each other's soak
    table; its summary line, asserted OK."""
    result = subprocess.run(
        [
            *(sys.executable, "-m", "tests.soak", "--jobs", "300", "--window", "5"),
            *("--max-seconds", "120", "--database-url", f"{mariadb_url}_soak", *options),
        ],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=240,
    )
    summary = result.stdout.strip().splitlines()[-1] if result.stdout.strip() else result.stderr
    assert result.returncode == 0, summary
    assert " lost=0 " in summary and summary.endswith("OK"), summary
    return summary


def test_short_soak_loses_nothing_and_duplicates_no_more_than_it_killed(mariadb_url):
    run_soak(mariadb_url, "--runners", "3")


def test_short_soak_with_processes_and_async_handlers(mariadb_url):
    summary = run_soak(
        mariadb_url,
        *("--runners", "2", "--processes", "2", "--concurrency", "8", "--async-share", "0.5"),
    )

    assert " processes=2 concurrency=8 async_share=0.5 " in summary
