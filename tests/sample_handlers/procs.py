"""Handlers for the multi-process tests: each call appends one line naming the job and the
process that ran it, so a test can count runs per job and see that several runners shared
the work."""

from __future__ import annotations

import os
import signal
import time
from pathlib import Path
from typing import Any

GATE_PATIENCE = 60.0  # seconds a job waits at a closed gate before going on regardless


def record_pid(data: dict[str, Any]) -> str:
    """Append "<n> <pid>" to data["log"] (O_APPEND: several processes share the file).

    With data["gate"] (a path), a job that finds no file there first appends its pid to
    "<gate>.waiting" and waits for the file: a test opens the gate once every runner holds
    a job at it."""
    if "gate" in data:
        _wait_at_gate(Path(data["gate"]))
    _append(data["log"], f"{data['n']} {os.getpid()}")
    return f"recorded {data['n']}"


def _wait_at_gate(gate: Path) -> None:
    if gate.exists():
        return
    _append(f"{gate}.waiting", str(os.getpid()))
    deadline = time.monotonic() + GATE_PATIENCE
    while not gate.exists() and time.monotonic() < deadline:
        time.sleep(0.01)


def _append(path: str, line: str) -> None:
    fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        os.write(fd, f"{line}\n".encode())
    finally:
        os.close(fd)


def slow_pid(data: dict[str, Any]) -> str:
    """Append "start <n> <pid>", sleep data["seconds"], then append "done <n> <pid>"."""
    _append(data["log"], f"start {data['n']} {os.getpid()}")
    time.sleep(float(data["seconds"]))
    _append(data["log"], f"done {data['n']} {os.getpid()}")
    return "slept"


def freeze_once(data: dict[str, Any]) -> str:
    """The first call blocks the signals a time limit and a stop arrive by, then sleeps in C:
    nothing inside its process can end it. Later calls (the run after the kill) just record.

    Appends "frozen <pid>" before it freezes and "done <pid>" when it returns."""
    if _first_call(data):
        _append(data["log"], f"frozen {os.getpid()}")
        signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGALRM, signal.SIGTERM, signal.SIGINT})
        time.sleep(3600)
    _append(data["log"], f"done {os.getpid()}")
    return "thawed"


def hog_once(data: dict[str, Any]) -> str:
    """The first call holds the GIL in C (a builtin summing a huge range never returns to
    the interpreter), so every thread of its process stops: the heartbeat, the main loop,
    signal handlers. Later calls just record, as freeze_once does."""
    if _first_call(data):
        _append(data["log"], f"frozen {os.getpid()}")
        sum(range(10**15))
    _append(data["log"], f"done {os.getpid()}")
    return "thawed"


def _first_call(data: dict[str, Any]) -> bool:
    """Whether this is the job's first call, by a marker beside the log (claims are
    exclusive, so no two calls of one job race for it)."""
    marker = Path(f"{data['log']}.{data.get('n', 'first')}.called")
    if marker.exists():
        return False
    marker.touch()
    return True
