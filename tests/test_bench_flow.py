"""`python -m bench --only flow` end to end at its quick size, on a Redis of its own and a
database of the suite's: every mode drains its jobs and reports its figures. No figure's
size is asserted, only that each is there."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from tests.conftest import mysql_connect
from tests.servers import PrivateRedis, free_port

ROOT = Path(__file__).resolve().parent.parent


def test_flow_drains_every_mode_and_reports_each_figure(mariadb_url: str, tmp_path: Path) -> None:
    server = PrivateRedis(free_port(), tmp_path)
    server.start()
    try:
        child_env = dict(
            os.environ,
            PYTHONPATH=str(ROOT),
            BENCH_REDIS_URL=f"redis://127.0.0.1:{server.port}",
            BENCH_DATABASE_URL=f"{mariadb_url}_flow",
        )
        result = subprocess.run(
            [sys.executable, "-m", "bench", "--only", "flow", "--quick"],
            cwd=ROOT,
            env=child_env,
            capture_output=True,
            text=True,
            timeout=600,
        )
    finally:
        server.kill()
        _drop_database(f"{mariadb_url}_flow")
    assert result.returncode == 0, result.stderr[-2000:]
    report = json.loads(result.stdout.splitlines()[-1])
    flow = report["workloads"]["flow"]
    assert "error" not in flow, flow
    figures = flow["figures"]
    for mode in ("none", "rate", "concurrency", "locks"):
        assert figures[f"{mode}_jobs_per_s"] > 0
        assert figures[f"{mode}_redis_commands_per_job"] >= 0
    assert figures["rate_vs_limit"] > 0


def _drop_database(url: str) -> None:
    name = url.rsplit("/", 1)[1]
    conn = mysql_connect(url.rsplit("/", 1)[0] + "/")
    with conn.cursor() as cursor:
        cursor.execute(f"DROP DATABASE IF EXISTS `{name}`")
    conn.close()
