"""Counts on stderr while a long command works (`doctor --full`, `purge`): how many it has
read or deleted, how fast, of how many when that is known. Only when stderr is a terminal:
cron and pipes get the command's output alone."""

from __future__ import annotations

import sys
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager

Tally = Callable[[str, int, "int | None"], None]  # what, how many more, of how many


def _quiet(what: str, count: int, total: int | None) -> None:
    pass


@contextmanager
def counting() -> Iterator[Tally]:
    """A tally drawing a line per thing counted on stderr while the block runs, if stderr is
    a terminal (the lines go when it ends); one that shows nothing otherwise."""
    if not sys.stderr.isatty():
        yield _quiet
        return
    from rich.console import Console
    from rich.progress import BarColumn, Progress, TaskID, TextColumn, TimeElapsedColumn

    columns = (
        TextColumn("{task.description}"),
        BarColumn(),
        TextColumn("{task.fields[done]}"),
        TimeElapsedColumn(),
    )
    with Progress(*columns, console=Console(stderr=True), transient=True) as progress:
        tasks: dict[str, tuple[TaskID, float]] = {}  # what: its line, when counting began
        done: dict[str, int] = {}

        def tally(what: str, count: int, total: int | None) -> None:
            done[what] = done.get(what, 0) + count
            # rich 12.0 draws no bar of unknown length: one as long as the count so far.
            length = total if total is not None else max(done[what], 1)
            if what not in tasks:
                tasks[what] = (progress.add_task(what, total=length, done=""), time.monotonic())
            task, began = tasks[what]
            of = f" of {total:,}" if total is not None else ""
            rate = done[what] / max(time.monotonic() - began, 1e-6)
            words = f"{done[what]:,}{of}, {rate:,.0f}/s"
            progress.update(task, completed=done[what], total=length, done=words)

        yield tally
