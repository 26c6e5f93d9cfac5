"""`python -m bench --only scale` end to end at a small N: it starts a MariaDB and a Redis of
its own (or, with --embedded, delayq's embedded default: SQLite and the embedded Redis),
measures every figure on the almost empty table and at depth, and leaves neither server nor
data directory behind. No figure's size is asserted, only that each is there."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

from bench.servers import running_under

ROOT = Path(__file__).resolve().parents[2]
# Every figure the issue names, for each table (a path into its figures).
FIGURES = [
    *[
        ("command_s", name)
        for name in (
            "status",
            "status --json",
            "list",
            "list --status failed",
            "peek",
            "show",
            "metrics",
            "doctor",
            "run (nothing due)",
            "add",
        )
    ],
    ("web_s", "overview"),
    ("web_s", "failed search"),
    ("web_s", "job page"),
    ("reconcile_s",),
    ("reconcile_rows_per_s",),
    ("bare_select_rows_per_s",),
    ("first_job_s",),
    ("second_runner_first_job_s",),
    ("index_complete_s",),
    ("index_entries_per_s",),
    ("bare_zadd_entries_per_s",),
    ("purge_deleted",),
    ("purge_rows_per_s",),
    ("purge_lateness_p99_s",),
    ("lateness_p99_s",),
    ("redis_bytes_per_job",),
    ("runner_peak_rss_mib",),
    ("add_many_jobs_per_s",),
    ("add_many_last_tenth_jobs_per_s",),
]


def figure(table: dict[str, object], path: tuple[str, ...]) -> object:
    value: object = table
    for key in path:
        assert isinstance(value, dict), path
        value = value.get(key)
    return value


def is_server(pid: int) -> bool:
    try:
        command = Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return False
    return b"mariadbd" in command or b"redis-server" in command


def run_scale(*options: str) -> dict[str, object]:
    """The scale workload at N=2000, checked whole; its figures."""
    child_env = dict(os.environ, PYTHONPATH=str(ROOT))
    done = subprocess.run(
        [sys.executable, "-m", "bench", "--only", "scale", "--jobs", "2000", "--quick", *options],
        cwd=ROOT,
        env=child_env,
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )
    assert done.returncode == 0, done.stderr[-4000:]
    report = json.loads(done.stdout.strip().splitlines()[-1])
    scale = report["workloads"]["scale"]
    figures = scale["figures"]
    assert figures["jobs"] == 2000
    for phase in ("empty", "depth"):
        for path in FIGURES:
            value = figure(figures[phase], path)
            assert isinstance(value, (int, float)), f"{phase} {'.'.join(path)} is {value!r}"
        full = figures[phase]["command_s"]["doctor --full"]
        assert isinstance(full, float) or "doctor --full" in figures["unavailable"]
    assert figures["depth"]["rows"]["pending"] >= 2000
    assert figures["depth"]["jobs_run"] == figures["empty"]["jobs_run"] == 200
    assert scale["targets"] and all(isinstance(t["ok"], bool) for t in scale["targets"].values())
    data_dir = Path(figures["data_dir"])
    assert not data_dir.exists()
    assert running_under(data_dir) == []
    assert not [pid for pid in figures["server_pids"] if is_server(pid)]
    return figures


def test_scale_measures_every_figure_on_servers_of_its_own_and_leaves_none_behind():
    assert shutil.which("redis-server"), "redis-server is not installed"
    assert shutil.which("mariadbd") or Path("/usr/sbin/mariadbd").exists(), (
        "mariadbd is not installed"
    )
    figures = run_scale()
    assert set(figures["servers"]) == {"mariadb", "redis"}
    assert len(figures["server_pids"]) == 2


def test_scale_embedded_measures_every_figure_on_the_embedded_default_and_leaves_none_behind():
    figures = run_scale("--embedded")
    assert set(figures["servers"]) == {"sqlite", "redis"}
    assert figures["buffer_pool_bytes"] is None
    assert figures["depth"]["table"]["index_bytes"] > 0  # dbstat read the SQLite file
    assert len(figures["server_pids"]) == 2  # an embedded Redis for each table's home
