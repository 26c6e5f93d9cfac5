"""Many jobs in flight: a runner's pool. A plain handler's call takes a thread; an `async def`
handler's call is a task on the runner's event loop, cancelled there at its time limit. The
pool and its threads live as long as the runner; each drain that uses it ends by `release`,
so that nothing it started can land in the next.

The main thread hands jobs to the pool while it has room and collects what they finished;
the two sides share only the queue of finished calls and the table of calls in flight,
behind one lock. A thread cannot be killed, so one past its time limit is given up from
outside: its call is recorded as timed out, JobTimeout raised into it (reaching Python code,
not a blocking C call), and a fresh thread takes its place, so the pool still makes N calls
at once. What a call given up on returns later is refused.
"""

from __future__ import annotations

import asyncio
import contextlib
import ctypes
import functools
import heapq
import itertools
import logging
import queue
import threading
import time
from collections.abc import Callable, Coroutine
from dataclasses import dataclass
from typing import Any

from ..base.threads import keep_signals_off_this_thread
from ..store.table import ClaimedJob, Outcome
from .interrupts import JobTimeout

logger = logging.getLogger(__name__)

# With this many tasks in flight on the event loop, the main thread lets the tasks that end
# in the next GATHER_FOR seconds join the first it collects: each wake-up costs both threads
# a hand-over of the interpreter lock, and at 200 tasks of 50 ms (python -m bench --only
# aio) 1 ms of gathering took 4 % off the run (1.75 s against 1.83 s, means of 8 runs).
GATHER_FROM = 64
GATHER_FOR = 0.001

CallJob = Callable[[ClaimedJob], Outcome]
# What a call that raised came to: an error raised into its thread outside the handler's call.
Crashed = Callable[[ClaimedJob, BaseException, float], Outcome]
# The job's call as a coroutine for the event loop, or None when it needs a thread.
CoroutineFor = Callable[[ClaimedJob], Coroutine[Any, Any, Outcome] | None]


@dataclass
class InFlight:
    """A call the pool is making: which job, on which thread, until when."""

    job: ClaimedJob
    deadline: float  # monotonic
    started: float  # monotonic
    drain: int  # the `Pool.drain` it was started in
    thread_id: int | None = None
    abandoned: bool = False
    task: asyncio.Task[Outcome] | None = None  # a call on the event loop, once started


class Pool:
    """Up to `size` calls at once of `call(job)`, or of `coroutine_for(job)` run on
    `loop_of()`; a job may run `limit_of(job)` seconds."""

    def __init__(
        self,
        size: int,
        call: CallJob,
        crashed: Crashed,
        limit_of: Callable[[ClaimedJob], float],
        coroutine_for: CoroutineFor = lambda job: None,  # by default every call takes a thread
        loop_of: Callable[[], asyncio.AbstractEventLoop] | None = None,
    ) -> None:
        self.size = size
        self.call = call
        self.crashed = crashed
        self.limit_of = limit_of
        self.coroutine_for = coroutine_for
        self.loop_of = loop_of
        self._lock = threading.Lock()
        self._work: queue.SimpleQueue[InFlight | None] = queue.SimpleQueue()
        # Finished calls, each with the drain it was started in, handed over a few at a time:
        # each put may wake the main thread.
        self._done: queue.SimpleQueue[list[tuple[int, Outcome]]] = queue.SimpleQueue()
        self._landed_calls: list[tuple[int, Outcome]] = []  # tasks ended in this turn of the loop
        self._in_flight: dict[int, InFlight] = {}  # by job id
        # Deadlines in flight, soonest first, asked for on every turn (with hundreds in flight
        # a scan cost real time); an entry of a call ended or given up on leaves at the top.
        self._deadlines: list[tuple[float, int, InFlight]] = []
        self._order = itertools.count()  # breaks ties between equal deadlines
        self._stuck = 0  # calls in _in_flight given up on: their threads are still inside
        self._threads = 0  # alive, stuck ones included
        # Calls that hold a thread or wait for one, stuck ones included: threads are started
        # when a plain handler's call finds none free, so a run of async handlers has none.
        self._thread_calls = 0
        # Calls started and neither collected nor given up on; only the main thread counts.
        self.busy = 0
        self.drain = 0  # counts the drains served: a late outcome of an earlier one is dropped

    @property
    def stuck(self) -> int:
        """Threads still inside a handler that was given up on."""
        with self._lock:
            return self._stuck

    @property
    def free(self) -> int:
        return self.size - self.busy

    def start(self, jobs: list[ClaimedJob]) -> None:
        """Hand each of `jobs` to the pool, which has room for them: a thread, or a task on
        the event loop; the tasks are started by one call into the loop."""
        now = time.monotonic()
        tasks: list[tuple[InFlight, Coroutine[Any, Any, Outcome]]] = []
        queued = 0
        for job in jobs:
            call = InFlight(job, now + self.limit_of(job), now, self.drain)
            coroutine = self.coroutine_for(job)
            with self._lock:
                self._in_flight[job.id] = call
                self._push_deadline(call)
            self.busy += 1
            if coroutine is None:
                self._work.put(call)
                queued += 1
            else:
                tasks.append((call, coroutine))
        self._add_threads(queued)
        if tasks:
            assert self.loop_of is not None
            self.loop_of().call_soon_threadsafe(self._start_tasks, tasks)

    def _start_tasks(self, tasks: list[tuple[InFlight, Coroutine[Any, Any, Outcome]]]) -> None:
        """On the loop's thread: a task for each call not given up on meanwhile."""
        loop = asyncio.get_running_loop()
        for call, coroutine in tasks:
            with self._lock:
                if call.abandoned:
                    self._forget(call)
                    coroutine.close()
                    continue
                task = call.task = loop.create_task(coroutine)
            task.add_done_callback(functools.partial(self._landed, call))

    def _landed(self, call: InFlight, task: asyncio.Task[Outcome]) -> None:
        """A task ended (on the loop's thread): hand its outcome over."""
        try:
            outcome = task.result()
        except BaseException as exc:  # noqa: BLE001 - cancelled outside the handler's call
            outcome = self.crashed(call.job, exc, call.started)
        with self._lock:
            self._forget(call)
            late = call.abandoned
        if late:
            logger.error("job %d finished after its time limit; its result is refused", call.job.id)
            return
        if not self._landed_calls:  # the first this turn: hand them all over on the next
            task.get_loop().call_soon(self._hand_over_landed)
        self._landed_calls.append((call.drain, outcome))

    def _hand_over_landed(self) -> None:
        """On the loop's thread: the tasks that ended in one turn wake the main thread once."""
        landed, self._landed_calls = self._landed_calls, []
        self._done.put(landed)

    def collect(self, timeout: float) -> list[Outcome]:
        """What the pool's calls finished, waiting up to `timeout` for the first; never a
        call given up on (its job was recorded as timed out)."""
        finished: list[tuple[int, Outcome]] = []
        with contextlib.suppress(queue.Empty):
            finished += self._done.get(timeout=max(timeout, 0.0))
            if self.busy - self._thread_calls >= GATHER_FROM:
                time.sleep(GATHER_FOR)
            while True:
                finished += self._done.get_nowait()
        mine = [outcome for drain, outcome in finished if drain == self.drain]
        for outcome in (outcome for drain, outcome in finished if drain != self.drain):
            logger.error(
                "job %d finished after its run stopped; its lease brings it back", outcome.id
            )
        self.busy -= len(mine)
        return mine

    def release(self) -> None:
        """The drain is over (every call collected or given up on): what it started and
        still lands is dropped, not handed to the next drain."""
        if self.busy:
            logger.error("%d calls were neither collected nor given up on", self.busy)
        self.drain += 1
        self.busy = 0

    def next_deadline(self) -> float | None:
        with self._lock:
            deadlines = self._deadlines
            while deadlines and not self._is_live(deadlines[0][2]):
                heapq.heappop(deadlines)
            return deadlines[0][0] if deadlines else None

    def _is_live(self, call: InFlight) -> bool:
        """Whether a call is in flight and not given up on (the caller holds the lock)."""
        return not call.abandoned and self._in_flight.get(call.job.id) is call

    def _push_deadline(self, call: InFlight) -> None:
        """Add a call's deadline (the caller holds the lock). Entries of finished calls below
        the top stay until they reach it; behind one long call they would pile up, so the
        heap is rebuilt from the calls in flight when it is more than twice their number."""
        deadlines = self._deadlines
        if len(deadlines) > 2 * len(self._in_flight) + 64:
            deadlines[:] = [entry for entry in deadlines if self._is_live(entry[2])]
            heapq.heapify(deadlines)
        heapq.heappush(deadlines, (call.deadline, next(self._order), call))

    def expire(self) -> list[InFlight]:
        """Give up on the calls past their deadline (JobTimeout into a thread, a task
        cancelled), and return them."""
        now = time.monotonic()
        expired: list[InFlight] = []
        with self._lock:
            while self._deadlines and self._deadlines[0][0] <= now:
                call = heapq.heappop(self._deadlines)[2]
                if not self._is_live(call):  # ended or given up on already
                    continue
                expired.append(call)
                self._give_up(call)  # a task still running swallowed the loop's cancel
                if call.thread_id is not None:  # raised at the thread's next Python instruction
                    ctypes.pythonapi.PyThreadState_SetAsyncExc(
                        ctypes.c_ulong(call.thread_id), ctypes.py_object(JobTimeout)
                    )
        self.busy -= len(expired)
        return expired

    def _give_up(self, call: InFlight) -> None:
        """Mark a call in flight given up on and cancel its task, if it has one (the caller
        holds the lock); a task not started yet never starts."""
        call.abandoned = True
        self._stuck += 1
        if call.task is not None:
            with contextlib.suppress(RuntimeError):  # the loop is closed: the task is gone
                call.task.get_loop().call_soon_threadsafe(call.task.cancel)

    def _forget(self, call: InFlight) -> None:
        """A call left the table of calls in flight (the caller holds the lock)."""
        if self._in_flight.pop(call.job.id, None) is call and call.abandoned:
            self._stuck -= 1

    def abandon_all(self) -> list[InFlight]:
        """Give up on every call still running: the run is stopping."""
        with self._lock:
            running = [call for call in self._in_flight.values() if not call.abandoned]
            for call in running:
                self._give_up(call)  # a task handed back must not go on meanwhile
        self.busy -= len(running)
        return running

    def close(self) -> None:
        """Let idle threads end; threads stuck in a handler are daemons and die with us."""
        with self._lock:
            threads = self._threads
        for _ in range(threads):
            self._work.put(None)

    def _add_threads(self, calls: int) -> None:
        """Make sure `calls` more calls each find a thread (a stuck one keeps its own)."""
        if not calls:
            return
        with self._lock:
            self._thread_calls += calls
            missing = max(self._thread_calls - self._threads, 0)
            self._threads += missing
        for _ in range(missing):
            threading.Thread(target=self._serve, name="delayq-pool", daemon=True).start()

    def _serve(self) -> None:
        keep_signals_off_this_thread()
        ended = False  # through `_serve_one`, which then no longer counts this thread
        try:
            while not ended:
                try:
                    ended = not self._serve_one()
                except JobTimeout:
                    continue  # a time limit that fired just as its call ended
        finally:
            if not ended:  # anything else that ends a thread must not leave it counted
                with self._lock:
                    self._threads -= 1

    def _serve_one(self) -> bool:
        """Make one call; False when this thread ends."""
        call = self._work.get()
        if call is None:
            with self._lock:
                self._threads -= 1
            return False
        with self._lock:
            if call.abandoned:  # given up on before it started
                self._forget(call)
                self._thread_calls -= 1
                return True
            call.thread_id = threading.get_ident()
        try:
            outcome = self.call(call.job)
        except BaseException as exc:  # noqa: BLE001 - raised into this thread outside the call
            outcome = self.crashed(call.job, exc, call.started)
        with self._lock:
            call.thread_id = None  # out of the handler: no JobTimeout for it any more
            self._forget(call)
            self._thread_calls -= 1
            late = call.abandoned
            # A fresh thread took a stuck one's place meanwhile: one too many now ends.
            surplus = late and self._threads > max(self.size, self._thread_calls)
            if surplus:
                self._threads -= 1
            if not late:  # under the lock: `abandon_all` finds it either in flight or landed
                self._done.put([(call.drain, outcome)])
        if not late:
            return True
        logger.error("job %d finished after its time limit; its result is refused", call.job.id)
        return not surplus
