"""Handlers that misbehave on purpose: they kill their process, kill the database
connections of the run, report their own context. Each appends to data["log"] first."""

from __future__ import annotations

import ctypes
import os
import subprocess
import sys
import time
from typing import Any
from urllib.parse import urlparse

import pymysql

import delayq
from tests.sample_handlers.jobs import _append, read_log


def die(data: dict[str, Any]) -> None:
    """Kill the whole process, as a segfault or the OOM killer would."""
    _append(data["log"], "die")
    os._exit(9)


def whoami(data: dict[str, Any]) -> str:
    job = delayq.current_job()
    assert job is not None
    _append(data["log"], f"{job.id} {job.attempt} {job.chain_id} {job.ext}")
    if data.get("fail"):
        raise ValueError("again")
    return f"{job.id}/{job.attempt}"


def kill_db_connections(data: dict[str, Any]) -> str:
    """KILL every other connection to the test database: the run's own included."""
    url = urlparse(data["url"])
    conn = pymysql.connect(
        host=url.hostname,
        port=url.port or 3306,
        user=url.username or "root",
        password=url.password or "",
        database=url.path.lstrip("/"),
    )
    killed = 0
    with conn.cursor() as cursor:
        cursor.execute(
            "SELECT id FROM information_schema.processlist WHERE db = %s AND id <> CONNECTION_ID()",
            (url.path.lstrip("/"),),
        )
        for (connection_id,) in cursor.fetchall():
            cursor.execute(f"KILL {int(connection_id)}")
            killed += 1
    conn.close()
    _append(data["log"], f"killed {killed}")
    return f"killed {killed}"


def cancel_own_series(data: dict[str, Any]) -> str:
    """Cancel this job's own series from another process while this occurrence runs."""
    job = delayq.current_job()
    assert job is not None
    env = dict(os.environ, **data["env"])
    done = subprocess.run(
        [sys.executable, "-m", "delayq", "cancel", "--ext", job.ext],
        env=env,
        capture_output=True,
        text=True,
        check=True,
    )
    _append(data["log"], f"cancelled {done.stdout.strip()}")
    return "cancelled"


def starve_heartbeat(data: dict[str, Any]) -> str:
    """Hold the interpreter for data["seconds"] so the run's heartbeat thread cannot renew
    its leases, then do what a recovering run would: take job data["victim"] back."""
    from delayq.store.table.model import Job, Status

    interval = sys.getswitchinterval()
    sys.setswitchinterval(100)
    try:
        end = time.monotonic() + float(data["seconds"])
        while time.monotonic() < end:
            pass
    finally:
        sys.setswitchinterval(interval)
    Job.update(status=Status.PENDING, lease_token=None, lease_until=None).where(
        Job.id == data["victim"]
    ).execute()
    _append(data["log"], "starved")
    return "starved"


def hold_the_gil(data: dict[str, Any]) -> str:
    """On its first call, sleep data["seconds"] in C without releasing the GIL (ctypes.PyDLL
    keeps it), as a long C call that holds it does: no other thread of the run, its
    heartbeat included, runs meanwhile. Later calls return at once."""
    if read_log(data["log"]):
        _append(data["log"], "again")
        return "ran again"
    _append(data["log"], "holding")
    ctypes.PyDLL(None).sleep(int(data["seconds"]))
    _append(data["log"], "held")
    return "held"
