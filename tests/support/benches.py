"""`python -m bench --only WORKLOAD --quick` as the suite runs it: on a Redis of its own
(BENCH_REDIS_URL) and a database of the suite's (BENCH_DATABASE_URL, dropped after), for
the tests that check a workload end to end."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

from tests.conftest import mysql_connect
from tests.support.servers import PrivateRedis, free_port

ROOT = Path(__file__).resolve().parents[2]


def run_quick(workload: str, database_url: str, tmp_path: Path) -> dict[str, Any]:
    """The workload's report (figures, targets) once the benchmark exited 0 and reported
    no error for it."""
    server = PrivateRedis(free_port(), tmp_path)
    server.start()
    try:
        child_env = dict(
            os.environ,
            PYTHONPATH=str(ROOT),
            BENCH_REDIS_URL=f"redis://127.0.0.1:{server.port}",
            BENCH_DATABASE_URL=database_url,
        )
        result = subprocess.run(
            [sys.executable, "-m", "bench", "--only", workload, "--quick"],
            cwd=ROOT,
            env=child_env,
            capture_output=True,
            text=True,
            timeout=600,
        )
    finally:
        server.kill()
        _drop_database(database_url)
    assert result.returncode == 0, result.stderr[-2000:]
    report = json.loads(result.stdout.splitlines()[-1])["workloads"][workload]
    assert "error" not in report, report
    return report


def _drop_database(url: str) -> None:
    name = url.rsplit("/", 1)[1]
    conn = mysql_connect(url.rsplit("/", 1)[0] + "/")
    with conn.cursor() as cursor:
        cursor.execute(f"DROP DATABASE IF EXISTS `{name}`")
    conn.close()
