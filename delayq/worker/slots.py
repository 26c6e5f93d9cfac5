"""Many jobs in flight: a run's slots, each a thread that calls one handler at a time.

The main thread hands jobs to free slots and collects what they finished; the two sides
share only the queue of finished calls and the table of calls in flight, behind one lock.
A thread cannot be killed, so a handler past its time limit is given up from outside: its
call is recorded as timed out, JobTimeout is raised into its thread (which reaches Python
code, not a blocking C call), and a fresh thread takes the slot, so the run keeps its N real
slots. What the stuck thread returns later is refused.
"""

from __future__ import annotations

import ctypes
import logging
import queue
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass

from ..store.table import ClaimedJob
from ..threads import keep_signals_off_this_thread
from .interrupts import JobTimeout

logger = logging.getLogger(__name__)

Call = Callable[[ClaimedJob], object]


@dataclass
class InFlight:
    """A call a slot is making: which job, on which thread, until when."""

    job: ClaimedJob
    deadline: float  # monotonic
    started: float  # monotonic
    thread_id: int | None = None
    abandoned: bool = False


@dataclass
class Finished:
    job: ClaimedJob
    result: object  # what `call` returned, or the BaseException it raised


class Slots:
    """`size` threads calling `call(job)`; a job may run `limit_of(job)` seconds."""

    def __init__(self, size: int, call: Call, limit_of: Callable[[ClaimedJob], float]) -> None:
        self.size = size
        self.call = call
        self.limit_of = limit_of
        self._lock = threading.Lock()
        self._work: queue.SimpleQueue[InFlight | None] = queue.SimpleQueue()
        self._done: queue.SimpleQueue[Finished] = queue.SimpleQueue()
        self._in_flight: dict[int, InFlight] = {}  # by job id
        self._threads = 0  # alive, stuck ones included
        # Calls started and neither collected nor given up on; only the main thread counts.
        self.busy = 0
        for _ in range(size):
            self._add_thread()

    @property
    def stuck(self) -> int:
        """Threads still inside a handler that was given up on."""
        with self._lock:
            return sum(1 for call in self._in_flight.values() if call.abandoned)

    @property
    def free(self) -> int:
        return self.size - self.busy

    def start(self, job: ClaimedJob) -> None:
        """Hand `job` to a free slot."""
        now = time.monotonic()
        call = InFlight(job, now + self.limit_of(job), now)
        with self._lock:
            self._in_flight[job.id] = call
        self.busy += 1
        self._work.put(call)

    def collect(self, timeout: float) -> list[Finished]:
        """What slots finished, waiting up to `timeout` for the first. Calls given up on are
        never among them: their job was already recorded as timed out."""
        finished: list[Finished] = []
        try:
            finished.append(self._done.get(timeout=max(timeout, 0.0)))
            while True:
                finished.append(self._done.get_nowait())
        except queue.Empty:
            pass
        self.busy -= len(finished)
        return finished

    def next_deadline(self) -> float | None:
        with self._lock:
            deadlines = [c.deadline for c in self._in_flight.values() if not c.abandoned]
        return min(deadlines, default=None)

    def expire(self) -> list[InFlight]:
        """Give up on every call past its deadline: raise JobTimeout into its thread and let
        a fresh thread take its slot. Returns the calls given up on."""
        now = time.monotonic()
        with self._lock:
            expired = [
                call
                for call in self._in_flight.values()
                if not call.abandoned and call.deadline <= now
            ]
            for call in expired:
                call.abandoned = True
                if call.thread_id is not None:
                    _raise_in_thread(call.thread_id, JobTimeout)
        for _ in expired:
            self._add_thread()
        self.busy -= len(expired)
        return expired

    def abandon_all(self) -> list[InFlight]:
        """Give up on every call still running (the run is stopping); their late results
        are refused."""
        with self._lock:
            running = [call for call in self._in_flight.values() if not call.abandoned]
            for call in running:
                call.abandoned = True
        self.busy -= len(running)
        return running

    def close(self) -> None:
        """Let idle threads end; threads stuck in a handler are daemons and die with us."""
        with self._lock:
            threads = self._threads
        for _ in range(threads):
            self._work.put(None)

    def _add_thread(self) -> None:
        with self._lock:
            self._threads += 1
        threading.Thread(target=self._serve, name="delayq-slot", daemon=True).start()

    def _serve(self) -> None:
        keep_signals_off_this_thread()
        try:
            while True:
                try:
                    if not self._serve_one():
                        return
                except JobTimeout:
                    continue  # a time limit that fired just as its call ended
        finally:
            with self._lock:
                self._threads -= 1

    def _serve_one(self) -> bool:
        """Make one call; False when this thread should end."""
        call = self._work.get()
        if call is None:
            return False
        with self._lock:
            if call.abandoned:  # given up on before it started
                return True
            call.thread_id = threading.get_ident()
        try:
            result: object = self.call(call.job)
        except BaseException as exc:  # noqa: BLE001 - handed to the main thread as it is
            result = exc
        with self._lock:
            call.thread_id = None  # out of the handler: no JobTimeout for it any more
            self._in_flight.pop(call.job.id, None)
            late, surplus = call.abandoned, self._threads > self.size
        if not late:
            self._done.put(Finished(call.job, result))
            return True
        logger.error("job %d finished after its time limit; its result is refused", call.job.id)
        return not surplus  # a fresh thread took its slot meanwhile


def _raise_in_thread(thread_id: int, exc_type: type[BaseException]) -> None:
    """Raise `exc_type` in another thread at its next Python instruction."""
    ctypes.pythonapi.PyThreadState_SetAsyncExc(
        ctypes.c_ulong(thread_id), ctypes.py_object(exc_type)
    )
