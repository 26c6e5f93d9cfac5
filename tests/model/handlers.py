"""The handler the model's jobs call: it notes each call's job id in the log its data names,
so that the model counts the calls of each job (none twice) and compares each with its row's
due time (none early). A job whose data says `fail` fails, for its retry to follow."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import delayq


def record(data: dict[str, Any]) -> str:
    job = delayq.current_job()
    job_id = job.id if job is not None else 0
    fd = os.open(data["log"], os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        os.write(fd, f"{job_id}\n".encode())
    finally:
        os.close(fd)
    if data.get("fail"):
        raise ValueError("failing on purpose, for the retry")
    return "recorded"


def calls(log: str | Path) -> list[int]:
    """The job ids the handler was called for, in order."""
    path = Path(log)
    return [int(line) for line in path.read_text().split()] if path.exists() else []
