"""on_failure hooks for the tests: each appends what it was given to the file named by
$HOOK_LOG, as one JSON line, so tests read the hook's calls from its own side."""

from __future__ import annotations

import json
import os
import signal
import threading
from typing import Any


def record(job: dict[str, Any], error: BaseException | None) -> None:
    raised = None if error is None else [type(error).__name__, str(error)]
    with open(os.environ["HOOK_LOG"], "a", encoding="utf-8") as log:
        log.write(json.dumps({"job": job, "raised": raised}) + "\n")


def broken(job: dict[str, Any], error: BaseException | None) -> None:
    record(job, error)
    raise RuntimeError(f"hook broke on job {job['id']}")


def hang(job: dict[str, Any], error: BaseException | None) -> None:
    record(job, error)
    threading.Event().wait()


def blocked_signals(job: dict[str, Any], error: BaseException | None) -> None:
    """Records the signals its thread blocks, by name."""
    blocked = sorted(signal.Signals(number).name for number in signal.pthread_sigmask(0, []))
    with open(os.environ["HOOK_LOG"], "a", encoding="utf-8") as log:
        log.write(json.dumps({"job": job, "blocked": blocked}) + "\n")


NOT_CALLABLE = "a hook that is not a function"
