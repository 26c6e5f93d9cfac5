"""Work done on helper threads, each on a database connection of its own, while the caller's
thread prepares the next piece: purge's DELETEs on MySQL, where row locks let two run side
by side, while the caller reads the next batch's ids. At 10M finished rows one DELETE at a
time with the reads between them left a core idle: the reads took a fifth of purge's time,
and a second DELETE stream ran at up to 1.5 times one."""

from __future__ import annotations

import queue
import threading
import time
from collections.abc import Callable, Iterable, Iterator
from typing import Generic, TypeVar

from ..base.threads import keep_signals_off_this_thread
from ..store.table import Table, close_connection

T = TypeVar("T")
R = TypeVar("R")

_STOP = object()  # handed to each helper as the last piece


class Done(Generic[T, R]):
    """A piece of work, what it returned, and the seconds it took."""

    __slots__ = ("item", "result", "took")

    def __init__(self, item: T, result: R, took: float) -> None:
        self.item = item
        self.result = result
        self.took = took


def alongside(
    table: Table,
    items: Iterable[T],
    work: Callable[[T], R],
    helpers: int,
    rest: Callable[[float], float],
    name: str,
) -> Iterator[Done[T, R]]:
    """`work(item)` for each of `items` on `helpers` threads named `name`-1, -2..., yielding
    each as it finishes.
    The caller's thread draws the items (reading them from the database, say) while the
    helpers work, at most `helpers` items ahead; each helper rests `rest(took)` seconds after
    each piece. The first error of a helper stops the rest (pieces begun finish) and is
    raised here; so is the caller's own, after the pieces begun have finished."""
    todo: queue.Queue[object] = queue.Queue(maxsize=helpers)
    done: queue.Queue[Done[T, R] | BaseException] = queue.Queue()
    failed = threading.Event()

    def helper() -> None:
        keep_signals_off_this_thread()
        try:
            while (item := todo.get()) is not _STOP:
                if failed.is_set():
                    continue  # keep taking pieces, so the caller never waits on a full queue
                started = time.monotonic()
                try:
                    result = work(item)  # type: ignore[arg-type]
                except BaseException as exc:
                    failed.set()
                    done.put(exc)
                    continue
                took = time.monotonic() - started
                done.put(Done(item, result, took))  # type: ignore[arg-type]
                time.sleep(rest(took))
        finally:
            close_connection(table)

    threads = [threading.Thread(target=helper, name=f"{name}-{n + 1}") for n in range(helpers)]
    for thread in threads:
        thread.start()
    try:
        for item in items:
            if failed.is_set():
                break
            todo.put(item)
            yield from _finished(done)
    finally:
        for _ in threads:
            todo.put(_STOP)
        for thread in threads:
            thread.join()
    yield from _finished(done)


def _finished(done: queue.Queue[Done[T, R] | BaseException]) -> Iterator[Done[T, R]]:
    """What the helpers have finished so far, without waiting; a helper's error raised."""
    while True:
        try:
            finished = done.get_nowait()
        except queue.Empty:
            return
        if isinstance(finished, BaseException):
            raise finished
        yield finished
