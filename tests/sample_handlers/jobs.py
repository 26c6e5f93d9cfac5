"""Handlers for the tests. Every call appends one line to data["log"] (O_APPEND, so several
processes may share the file), which is how tests count runs without trusting delayq."""

from __future__ import annotations

import os
import time
from pathlib import Path
from typing import Any

import redis

from delayq import NoRetry


def record(data: dict[str, Any]) -> str:
    """Append data["n"] to the log and return a short text."""
    _append(data["log"], str(data.get("n", "")))
    return f"recorded {data.get('n')}"


def fail(data: dict[str, Any]) -> None:
    _append(data["log"], f"fail {data.get('n', '')}")
    raise ValueError(f"boom {data.get('n', '')}")


def fail_for_good(data: dict[str, Any]) -> None:
    _append(data["log"], f"fail_for_good {data.get('n', '')}")
    raise NoRetry("the order is gone")


def exit_process(data: dict[str, Any]) -> None:
    _append(data["log"], "exit")
    raise SystemExit(3)


def slow(data: dict[str, Any]) -> str:
    """Mark the start, sleep data["seconds"], then record the finish."""
    _append(data["log"], f"start {data.get('n', '')}")
    time.sleep(float(data["seconds"]))
    _append(data["log"], f"done {data.get('n', '')}")
    return "slept"


def timed(data: dict[str, Any]) -> str:
    """As slow, each line also naming the runner's host (its DELAYQ_TEST_HOST) and the time:
    "start <n> <host> <epoch seconds>", then "done ..." the same."""
    host = os.environ.get("DELAYQ_TEST_HOST", "?")
    _append(data["log"], f"start {data['n']} {host} {time.time():.3f}")
    time.sleep(float(data["seconds"]))
    _append(data["log"], f"done {data['n']} {host} {time.time():.3f}")
    return "slept"


def gated(data: dict[str, Any]) -> str:
    """Mark the start, wait until the file data["gate"] exists (at most data["seconds"],
    default 30), then record the finish: a job that ends when the test says so."""
    _append(data["log"], f"start {data.get('n', '')}")
    gate = Path(data["gate"])
    deadline = time.monotonic() + float(data.get("seconds", 30))
    while not gate.exists() and time.monotonic() < deadline:
        time.sleep(0.01)
    _append(data["log"], f"done {data.get('n', '')}")
    return "opened" if gate.exists() else "gave up"


def stop_redis(data: dict[str, Any]) -> str:
    """Shut the Redis at data["url"] down: the run's own writes after this call fail."""
    _append(data["log"], "stop_redis")
    redis.Redis.from_url(data["url"]).shutdown(nosave=True)
    return "stopped"


def echo(data: Any) -> Any:
    return data


class Refund:
    """A class whose plain method needs an instance, as a business handler would."""

    def __init__(self) -> None:
        self.prefix = "refunded"

    def run(self, data: dict[str, Any]) -> str:
        _append(data["log"], f"refund {data['order']}")
        return f"{self.prefix} {data['order']}"

    @staticmethod
    def audit(data: dict[str, Any]) -> str:
        _append(data["log"], "audit")
        return "audited"


def _append(log: str, line: str) -> None:
    fd = os.open(log, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        os.write(fd, (line + "\n").encode())
    finally:
        os.close(fd)


def read_log(log: str | Path) -> list[str]:
    path = Path(log)
    return path.read_text().splitlines() if path.exists() else []
