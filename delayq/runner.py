"""One pass of `delayq run`: settle the jobs of dead runs, re-index orphans, then claim due
jobs in batches, call each handler in-process under its time limit, and hand the outcomes to
the journal and its group commits.

The runner owns the order of those steps and nothing else: the table decides who wins a job
(leases.py), the index only hands out due ids, outcomes.py records, retry.py says when.
"""

from __future__ import annotations

import json
import logging
import signal
import threading
import time
import uuid
from collections.abc import Callable, Sequence
from concurrent.futures import Future
from dataclasses import dataclass, field
from typing import Any

from . import context, interrupts, leases, recovery
from .bookkeeper import Bookkeeper
from .config import DEFAULT_QUEUE, Settings
from .durations import format_instant
from .errors import BadInput, HandlerNotAllowed, NoRetry
from .handlers import Handler, resolve
from .index import ScheduleIndex
from .interrupts import Abandoned, GracefulStop, JobTimeout
from .models import MESSAGE_MAX, ClaimedJob, Job, Status
from .outcomes import Outcome, OutcomeBuffer, Settled
from .report import JobOutcome, OutcomeCallback, RunReport
from .retry import should_retry

logger = logging.getLogger(__name__)


@dataclass
class RunLimits:
    since: float
    limit: int | None
    max_seconds: float
    sweep: bool = True  # recover leases and re-index orphans before claiming


@dataclass
class _Pass:
    settings: Settings
    index: ScheduleIndex
    limits: RunLimits
    clock: Callable[[], float]
    on_outcome: OutcomeCallback | None
    stop: GracefulStop | None
    token: str = field(default_factory=lambda: uuid.uuid4().hex)
    report: RunReport = field(default_factory=RunReport)
    handlers: dict[tuple[str, str], Handler | BadInput] = field(default_factory=dict)
    started_at: float = field(default_factory=time.monotonic)
    calls: int = 0
    time_limits: bool = False
    noted_order: bool = False
    bookkeeper: Bookkeeper | None = None  # started once a backlog shows up
    # Monotonic time by which our leases may have lapsed; the heartbeat pushes it out.
    lease_deadline: float = float("inf")


def run_once(
    settings: Settings,
    index: ScheduleIndex,
    queues: Sequence[str] | None = None,
    limits: RunLimits | None = None,
    now: float | None = None,
    on_outcome: OutcomeCallback | None = None,
    stop: GracefulStop | None = None,
) -> RunReport:
    """One pass over `queues` (default: every queue the index knows)."""
    limits = limits or RunLimits(settings.since, None, settings.max_seconds)
    clock = (lambda: now) if now is not None else index.now
    state = _Pass(settings, index, limits, clock, on_outcome, stop)
    started_at = clock()
    try:
        _run_queues(state, queues)
    except Exception as exc:
        _record_run(state, started_at, f"failed: {type(exc).__name__}")
        raise
    if stop is not None and stop.requested:
        state.report.interrupted = stop.signum
    _record_run(state, started_at, _run_outcome(state.report))
    return state.report


def _run_queues(state: _Pass, queues: Sequence[str] | None) -> None:
    try:
        with interrupts.time_limits() as enabled, _Heartbeat(state):
            state.time_limits = enabled
            state.report.reindexed += recovery.ensure_index(state.index)
            for queue in list(queues) if queues else known_queues(state.index):
                if state.limits.sweep:
                    _sweep(state, queue)
                _drain(state, queue)
    except Abandoned:
        logger.warning("run abandoned its current job; it is back on the schedule")
    finally:
        if state.bookkeeper is not None:
            state.bookkeeper.close()
            state.bookkeeper = None


def _run_outcome(report: RunReport) -> str:
    if report.interrupted is not None:
        return f"interrupted by {signal.Signals(report.interrupted).name}"
    return "stopped early (--limit or --max-seconds)" if report.stopped_early else "ok"


def _record_run(state: _Pass, started_at: float, outcome: str) -> None:
    state.report.elapsed = time.monotonic() - state.started_at
    try:
        state.index.record_run(started_at, state.report.elapsed, outcome, state.report.ran)
    except Exception as exc:  # noqa: BLE001 - a run is not failed by its own bookkeeping
        logger.warning("could not record the run for `delayq status`: %s", exc)


def known_queues(index: ScheduleIndex) -> list[str]:
    """Every queue the index has met, and always the default one, which producers that
    write rows themselves use without registering it."""
    return sorted(set(index.queues()) | {DEFAULT_QUEUE})


def _sweep(state: _Pass, queue: str) -> None:
    now = state.clock()
    recovered = recovery.recover_leases(state.index, queue, now)
    state.report.recovered += recovered.requeued + recovered.journaled
    state.report.failed += recovered.poisoned
    state.report.reindexed += recovery.reindex_orphans(state.index, queue, now)


def _drain(state: _Pass, queue: str) -> None:
    buffer = OutcomeBuffer(state.index, queue, state.token)
    upcoming: Future[_Batch | None] | None = None
    completed = False
    try:
        batch = _claim(state, queue, [], state.clock())
        while batch is not None:
            # A full batch means a backlog: lease the next one on the bookkeeping thread
            # while this one runs, and write its commits there too.
            if len(batch.claimed) == batch.size and _room_after(state, batch) > 0:
                buffer.bookkeeper = _bookkeeper(state)
                upcoming = buffer.bookkeeper.submit(
                    _claim, state, queue, batch.order, state.clock(), _room_after(state, batch)
                )
            _process_batch(state, queue, batch, buffer)
            if _should_stop(state):
                break
            if upcoming is not None:
                batch, upcoming = upcoming.result(), None
                if batch is not None:
                    continue
            batch = _claim(state, queue, [], state.clock())
        completed = True
    finally:
        if upcoming is not None:
            _hand_back_upcoming(state, queue, upcoming)
        _flush(state, buffer, quietly=not completed)
        state.index.close_journal()
        if state.noted_order:
            state.index.forget_order(queue, state.token)
            state.noted_order = False


@dataclass
class _Batch:
    """Jobs claimed and leased together: those won, in the order they run."""

    size: int  # how many were asked for
    claimed: list[tuple[str, float]]
    due_by_id: dict[int, float]
    jobs: list[ClaimedJob]
    leased_at: float  # monotonic
    missed: int = 0
    dropped: int = 0
    noted: bool = False  # whether its order (after the batch before it) was noted

    @property
    def order(self) -> list[int]:
        return [job.id for job in self.jobs]


def _room_after(state: _Pass, batch: _Batch) -> int:
    """How many jobs the next batch may take: a --limit counts the ones not yet run."""
    size = state.settings.batch_size
    if state.limits.limit is None:
        return size
    return min(size, state.limits.limit - state.calls - len(batch.jobs))


def _bookkeeper(state: _Pass) -> Bookkeeper:
    if state.bookkeeper is None:
        state.bookkeeper = Bookkeeper()
    return state.bookkeeper


def _claim(
    state: _Pass, queue: str, before: list[int], now: float, size: int | None = None
) -> _Batch | None:
    """Claim due members, lease their rows and note their order (after `before`, the batch
    still running, so that recovery can tell which job was running); None if none is due.

    Runs on the main thread or, for the next batch of a backlog, on the bookkeeping thread:
    it only returns its counts, and the main thread adds them to the report.
    """
    if size is None:
        if _should_stop(state):
            return None
        size = state.settings.batch_size
        if state.limits.limit is not None:
            size = min(size, state.limits.limit - state.calls)
    claimed = state.index.claim_due(queue, now, size)
    if not claimed:
        return None
    batch = _Batch(size, claimed, {}, [], time.monotonic())
    batch.due_by_id = _parse_members(batch, queue, claimed)
    cutoff = now - state.limits.since
    late = [job_id for job_id, due in batch.due_by_id.items() if due < cutoff]
    batch.missed = _mark_missed(state, batch, late, now)
    runnable = [job_id for job_id, due in batch.due_by_id.items() if due >= cutoff]
    batch.leased_at = time.monotonic()
    jobs = leases.mark_running(runnable, state.token, now + state.settings.lease, now)
    batch.dropped += len(runnable) - len(jobs)
    jobs.sort(key=lambda job: (batch.due_by_id[job.id], job.id))
    batch.jobs = jobs
    order = before + batch.order
    state.index.leased(queue, [member for member, _ in claimed], state.token, order)
    batch.noted = len(order) > 1
    return batch


def _hand_back_upcoming(state: _Pass, queue: str, upcoming: Future[_Batch | None]) -> None:
    """The run stopped with the next batch already leased: it goes back unstarted."""
    try:
        batch = upcoming.result()
    except Exception as exc:  # noqa: BLE001 - already stopping; its leases bring it back
        logger.error("could not lease the next batch (%s); its leases will bring it back", exc)
        return
    if batch is not None:
        _add_counts(state, batch)
        _hand_back(state, queue, batch.jobs, batch.due_by_id)


def _add_counts(state: _Pass, batch: _Batch) -> None:
    state.report.claimed += len(batch.claimed)
    state.report.missed += batch.missed
    state.report.dropped += batch.dropped
    state.noted_order = state.noted_order or batch.noted


def _flush(state: _Pass, buffer: OutcomeBuffer, quietly: bool) -> None:
    try:
        _count(state, buffer.flush())
    except Exception as exc:
        if not quietly:
            raise
        # Already failing: what was journaled is settled by the next run's recovery.
        logger.error("could not record outcomes (%s); the next run settles them", exc)


def _should_stop(state: _Pass) -> bool:
    if state.stop is not None and state.stop.requested:
        return True
    over_limit = state.limits.limit is not None and state.calls >= state.limits.limit
    over_time = time.monotonic() - state.started_at >= state.limits.max_seconds
    if over_limit or over_time:
        state.report.stopped_early = True
    return over_limit or over_time


def _process_batch(state: _Pass, queue: str, batch: _Batch, buffer: OutcomeBuffer) -> None:
    _add_counts(state, batch)
    # Its rows' leases run from when they were taken, or from a heartbeat since (a deadline
    # later than that one can only come from a beat that renewed them too).
    fresh = batch.leased_at + state.settings.lease
    first = state.lease_deadline == float("inf")
    state.lease_deadline = fresh if first else max(state.lease_deadline, fresh)
    jobs, due_by_id = batch.jobs, batch.due_by_id
    unstarted = 0
    held: set[int] | None = None  # None: every job of the batch, as leased
    try:
        for position, job in enumerate(jobs):
            if _should_stop(state):
                break
            if _lease_may_lapse(state):
                held = _reassert_leases(state, jobs[position:])
            if held is not None and job.id not in held:
                unstarted = position + 1  # another run took it over: not ours to run
                continue
            outcome = _execute(state, job, due_by_id[job.id])
            unstarted = position + 1
            _count(state, buffer.add(outcome, more_coming=unstarted < len(jobs)))
    finally:
        _hand_back(state, queue, jobs[unstarted:], due_by_id)


def _lease_may_lapse(state: _Pass) -> bool:
    # The heartbeat renews every third of the lease; a deadline this close means it fell
    # behind (a stalled thread, a busy database) and a recovering run may take jobs over.
    return time.monotonic() > state.lease_deadline - state.settings.lease / 3


def _reassert_leases(state: _Pass, jobs: list[ClaimedJob]) -> set[int]:
    renewed_at = time.monotonic()
    held = leases.still_held(
        [job.id for job in jobs], state.token, state.clock() + state.settings.lease
    )
    state.lease_deadline = renewed_at + state.settings.lease
    lost = len(jobs) - len(held)
    if lost:
        logger.warning("%d jobs of this run's batch were taken over by another run", lost)
    return held


def _parse_members(batch: _Batch, queue: str, claimed: list[tuple[str, float]]) -> dict[int, float]:
    due_by_id: dict[int, float] = {}
    for member, score in claimed:
        if member.isdigit():
            due_by_id[int(member)] = score
        else:
            batch.dropped += 1
            logger.warning("queue %s: dropped index member %r: not a job id", queue, member)
    return due_by_id


def _mark_missed(state: _Pass, batch: _Batch, ids: list[int], now: float) -> int:
    if not ids:
        return 0
    message = (
        f"missed: due more than {state.limits.since:g}s before the run at "
        f"{format_instant(now)}; `delayq retry ID` runs it"
    )
    count = leases.mark_missed(ids, message, now)
    batch.dropped += len(ids) - count
    logger.warning("%d jobs missed the run window (ids %s)", count, _preview(ids))
    return count


def _hand_back(
    state: _Pass, queue: str, jobs: list[ClaimedJob], due_by_id: dict[int, float]
) -> None:
    """Unstarted (or abandoned) jobs go back to pending and onto the schedule at once."""
    if not jobs:
        return
    try:
        released = leases.release([job.id for job in jobs], state.token, state.clock())
        state.index.add_many(queue, [(job_id, due_by_id[job_id]) for job_id, _ in released])
    except Exception as exc:  # noqa: BLE001 - their leases bring them back anyway
        logger.error("could not hand %d jobs back (%s); their leases will", len(jobs), exc)


def _execute(state: _Pass, job: ClaimedJob, due: float) -> Outcome:
    state.calls += 1
    started_at = state.clock()
    started = time.monotonic()
    state.report.lateness.observe(started_at - due)
    try:
        class_path, method, data = _parse_params(job.params)
        handler = _handler(state, class_path, method)
    except HandlerNotAllowed as exc:
        return _finish(state, job, ("?", "?"), Status.FAILED, str(exc), False, started)
    except BadInput as exc:
        retry = not str(exc).startswith("bad params")  # a deploy may fix a missing module
        return _finish(state, job, ("?", "?"), Status.FAILED, str(exc), retry, started)
    status, message, retry = _call(state, job, handler, data)
    return _finish(state, job, (class_path, method), status, message, retry, started)


def _call(state: _Pass, job: ClaimedJob, handler: Handler, data: Any) -> tuple[Status, str, bool]:
    """Run the handler under its time limit and the job context; never raises for its errors."""
    limit = job.timeout or state.settings.timeout
    token = context.running(
        context.JobContext(
            job.id, job.queue, job.retry_times, job.ext_string, job.run_at, job.chain_id or job.id
        )
    )
    try:
        if state.time_limits:
            interrupts.arm(limit)
        result = handler(data)
    except NoRetry as exc:
        return Status.FAILED, _describe(exc), False
    except JobTimeout:
        return Status.FAILED, f"JobTimeout: ran longer than its {limit:g}s time limit", True
    except (Exception, SystemExit) as exc:  # a handler's error, however bad, never stops the run
        return Status.FAILED, _describe(exc), True
    finally:
        if state.time_limits:
            interrupts.disarm()
        context.finished(token)
    return Status.SUCCESS, _short_result(result), False


def _parse_params(params: str) -> tuple[str, str, Any]:
    try:
        payload = json.loads(params)
    except (TypeError, ValueError) as exc:
        raise BadInput(f"bad params: not JSON ({exc})") from None
    if not isinstance(payload, dict):
        raise BadInput("bad params: not a JSON object")
    class_path, method = payload.get("class"), payload.get("method")
    if not isinstance(class_path, str) or not isinstance(method, str):
        raise BadInput('bad params: "class" and "method" must be strings')
    return class_path, method, payload.get("data")


def _handler(state: _Pass, class_path: str, method: str) -> Handler:
    key = (class_path, method)
    if key not in state.handlers:
        try:
            state.handlers[key] = resolve(class_path, method, state.settings.handlers)
        except BadInput as exc:
            state.handlers[key] = exc
    found = state.handlers[key]
    if isinstance(found, BadInput):
        raise found
    return found


def _finish(
    state: _Pass,
    job: ClaimedJob,
    call: tuple[str, str],
    status: Status,
    message: str,
    retry: bool,
    started: float,
) -> Outcome:
    duration = time.monotonic() - started
    outcome = Outcome(job, status, message, retry, state.clock())
    report = JobOutcome(
        job.id,
        job.queue,
        call[0],
        call[1],
        job.retry_times,
        status,
        message,
        duration,
        outcome.finished_at - duration - (job.run_at or outcome.finished_at),
        status == Status.FAILED and retry and should_retry(job.retry_times),
    )
    logger.info(
        "job %d %s.%s attempt %d: %s in %.3fs%s",
        job.id,
        call[0],
        call[1],
        job.retry_times,
        status.word,
        duration,
        "; will retry" if report.will_retry else "",
        extra={"job_outcome": report},  # logs.JsonLinesFormatter turns it into fields
    )
    if state.on_outcome is not None:
        state.on_outcome(report)
    return outcome


def _count(state: _Pass, settled: Settled | None) -> None:
    if settled is None:
        return
    state.report.succeeded += settled.succeeded
    state.report.failed += settled.failed
    state.report.retried += len(settled.retries)
    for job_id in settled.lost:
        logger.error("job %d finished but its lease had been taken over", job_id)


def _describe(exc: BaseException) -> str:
    try:
        text = str(exc)
    except Exception:  # noqa: BLE001 - a handler's exception may not even print
        text = "<unprintable>"
    return (f"{type(exc).__name__}: {text}" if text else type(exc).__name__)[:MESSAGE_MAX]


def _short_result(result: Any) -> str:
    if result is None:
        return ""
    if isinstance(result, str):
        return result[:MESSAGE_MAX]
    try:
        return json.dumps(result, default=repr)[:MESSAGE_MAX]
    except (TypeError, ValueError):
        return repr(result)[:MESSAGE_MAX]


def _preview(ids: list[int]) -> str:
    shown = ", ".join(str(job_id) for job_id in ids[:10])
    return shown + (", ..." if len(ids) > 10 else "")


class _Heartbeat:
    """Renews this run's leases in a background thread while handlers run.

    The lease only has to outlive a dead run, not a slow job: as long as the process lives,
    the heartbeat keeps its jobs from being taken over.
    """

    def __init__(self, state: _Pass) -> None:
        self.state = state
        self.stopped = threading.Event()
        self.thread = threading.Thread(target=self._beat, name="delayq-heartbeat", daemon=True)

    def __enter__(self) -> _Heartbeat:
        self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stopped.set()
        self.thread.join()

    def _beat(self) -> None:
        interrupts.keep_signals_off_this_thread()
        lease = self.state.settings.lease
        while not self.stopped.wait(lease / 3):
            try:
                renewed_at = time.monotonic()
                leases.renew_leases(self.state.token, self.state.clock() + lease)
                # A beat that came after the deadline cannot vouch for the gap: another run
                # may have taken jobs over in it, so the deadline stays past and the runner
                # checks what it still holds before its next job.
                if renewed_at < self.state.lease_deadline:
                    self.state.lease_deadline = renewed_at + lease
            except Exception as exc:  # noqa: BLE001 - a missed beat only shortens the lease
                logger.warning("lease heartbeat failed: %s", exc)
        Job._meta.database.close()
