"""The short chaos soak, as CI runs it: a few hundred jobs, three runners, random kill -9,
FLUSHDB and killed MariaDB connections; nothing lost, duplicates within the kills."""

from __future__ import annotations

import subprocess
import sys

import pytest

from tests.conftest import ROOT

pytestmark = pytest.mark.slow


def test_short_soak_loses_nothing_and_duplicates_no_more_than_it_killed(mariadb_url, tmp_path):
    # Named after the test database, so suites run side by side on one server (each with
    # its own DELAYQ_TEST_MARIADB_URL) do not drop each other's soak table.
    soak_db = f"{mariadb_url}_soak"
    result = subprocess.run(
        [
            sys.executable,
            "-m",
            "tests.soak",
            "--jobs",
            "300",
            "--runners",
            "3",
            "--window",
            "5",
            "--max-seconds",
            "120",
            "--database-url",
            soak_db,
        ],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=240,
    )

    summary = result.stdout.strip().splitlines()[-1] if result.stdout.strip() else result.stderr
    assert result.returncode == 0, summary
    assert " lost=0 " in summary and summary.endswith("OK"), summary
