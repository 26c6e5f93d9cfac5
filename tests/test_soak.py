"""The short chaos soak, as CI runs it: a few hundred jobs, three runners, random kill -9,
FLUSHDB and killed MariaDB connections; nothing lost, duplicates within the kills."""

from __future__ import annotations

import subprocess
import sys

import pytest

from tests.conftest import ROOT

pytestmark = pytest.mark.slow


def test_short_soak_loses_nothing_and_duplicates_no_more_than_it_killed(mariadb_url, tmp_path):
    soak_db = mariadb_url.rsplit("/", 1)[0] + "/delayq_soak"
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
