"""Handlers for the soak: each execution appends "<kind> <n> <attempt> <pid>" to data["log"],
so the soak counts executions from the handlers' own record, not from delayq's."""

from __future__ import annotations

import os
import time
from typing import Any

import delayq
from tests.sample_handlers.jobs import _append


def _note(data: dict[str, Any], kind: str) -> int:
    job = delayq.current_job()
    attempt = job.attempt if job else -1
    _append(data["log"], f"{kind} {data['n']} {attempt} {os.getpid()}")
    return attempt


def ok(data: dict[str, Any]) -> str:
    _note(data, "ok")
    return "ok"


def fail_once(data: dict[str, Any]) -> str:
    """Fails on the first attempt, succeeds on the retry."""
    if _note(data, "try") == 0:
        raise ConnectionError("flaky downstream")
    _note(data, "ok")
    return "ok"


def hang_once(data: dict[str, Any]) -> str:
    """Hangs past its time limit on the first attempt, succeeds on the retry."""
    if _note(data, "try") == 0:
        time.sleep(3600)
    _note(data, "ok")
    return "ok"


def refuse(data: dict[str, Any]) -> None:
    _note(data, "refused")
    raise delayq.NoRetry("not retryable")
