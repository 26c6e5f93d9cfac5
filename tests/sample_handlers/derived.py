"""Handlers for the derived-state soak (tests/soaks/derived_soak.py): each call appends
"start <tag> <pid> <row id> <time>" to data["log"] as it begins and "end ..." as it returns,
so the soak counts calls, their start times and how long a lock was held from the
handlers' own record, not from delayq's."""

from __future__ import annotations

import os
import time
from typing import Any

import delayq
from tests.sample_handlers.jobs import _append


def _note(data: dict[str, Any], word: str) -> None:
    job = delayq.current_job()
    job_id = job.id if job else -1
    _append(data["log"], f"{word} {data['tag']} {os.getpid()} {job_id} {time.time():.3f}")


def work(data: dict[str, Any]) -> str:
    """A job of any of the soak's queues: note its start, take data["seconds"], note its end."""
    _note(data, "start")
    if data.get("seconds"):
        time.sleep(data["seconds"])
    _note(data, "end")
    return "ok"
