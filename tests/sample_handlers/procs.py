"""Handlers for the multi-process tests: each call appends one line naming the job and the
process that ran it, so a test can count runs per job and see that several runners shared
the work."""

from __future__ import annotations

import os
from typing import Any


def record_pid(data: dict[str, Any]) -> str:
    """Append "<n> <pid>" to data["log"] (O_APPEND: several processes share the file)."""
    fd = os.open(data["log"], os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        os.write(fd, f"{data['n']} {os.getpid()}\n".encode())
    finally:
        os.close(fd)
    return f"recorded {data['n']}"
