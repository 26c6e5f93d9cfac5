"""How much work SQLite did for a call: its virtual-machine steps, counted by a progress
handler. They follow the rows a statement visits whatever the machine's speed, so a test can
say that a read's cost follows what it returns and not the table, without timing it."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, TypeVar

T = TypeVar("T")


def sqlite_steps(queue: Any, call: Callable[[], T]) -> tuple[T, int]:
    """What `call` returns, and the steps SQLite took meanwhile on the queue's connection."""
    conn = queue.db.connection()
    taken = 0

    def count() -> int:
        nonlocal taken
        taken += 1
        return 0  # go on

    conn.set_progress_handler(count, 1)
    try:
        return call(), taken
    finally:
        conn.set_progress_handler(None, 1)
