"""One pass of `delayq run`: recover lapsed leases, re-index orphans, then claim due jobs in
batches, call each handler in-process, record the outcome and schedule the retry.

The runner owns the order of those steps and nothing else: the table (models) decides who
wins a job, the index (ScheduleIndex) only hands out due ids, retry.py says when to retry.
"""

from __future__ import annotations

import json
import logging
import threading
import time
import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from . import models
from .config import Settings
from .durations import format_instant
from .errors import BadInput, HandlerNotAllowed, NoRetry
from .handlers import Handler, resolve
from .index import ScheduleIndex
from .models import Job, Status
from .retry import next_run_at, should_retry

logger = logging.getLogger(__name__)

# A pending row due this long ago and absent from the index was lost by Redis (or by a run
# that died between claim and lease); the grace keeps a live run's fresh claims out of reach.
ORPHAN_GRACE = 30.0
# A job whose run died under it this many times is a poison job: it fails instead.
MAX_LOST_LEASES = 3
SWEEP_LIMIT = 1000


@dataclass
class RunReport:
    """What one pass did; `delayq run -v` and the Python API show it."""

    claimed: int = 0
    succeeded: int = 0
    failed: int = 0
    retried: int = 0
    missed: int = 0
    dropped: int = 0
    recovered: int = 0
    reindexed: int = 0
    stopped_early: bool = False
    elapsed: float = 0.0


@dataclass(frozen=True)
class JobOutcome:
    """One job's result, handed to the caller's callback as it happens."""

    id: int
    queue: str
    class_path: str
    method: str
    attempt: int
    status: Status
    message: str
    duration: float
    retry_id: int | None = None


OutcomeCallback = Callable[[JobOutcome], None]


@dataclass
class RunLimits:
    since: float
    limit: int | None
    max_seconds: float


@dataclass
class _Pass:
    settings: Settings
    index: ScheduleIndex
    limits: RunLimits
    clock: Callable[[], float]
    on_outcome: OutcomeCallback | None
    token: str = field(default_factory=lambda: uuid.uuid4().hex)
    report: RunReport = field(default_factory=RunReport)
    handlers: dict[tuple[str, str], Handler | Exception] = field(default_factory=dict)
    started_at: float = field(default_factory=time.monotonic)
    calls: int = 0


def run_once(
    settings: Settings,
    index: ScheduleIndex,
    queues: Sequence[str] | None = None,
    limits: RunLimits | None = None,
    now: float | None = None,
    on_outcome: OutcomeCallback | None = None,
) -> RunReport:
    """One pass over `queues` (default: every queue the index knows)."""
    limits = limits or RunLimits(settings.since, None, settings.max_seconds)
    clock = (lambda: now) if now is not None else time.time
    state = _Pass(settings, index, limits, clock, on_outcome)
    _ensure_index(state)
    names = list(queues) if queues else index.queues()
    with _Heartbeat(state):
        for queue in names:
            _recover_leases(state, queue)
            _reindex_orphans(state, queue)
            _drain(state, queue)
    state.report.elapsed = time.monotonic() - state.started_at
    return state.report


def _ensure_index(state: _Pass) -> None:
    if state.index.is_complete():
        return
    state.index.register(models.pending_queues())
    count = state.index.rebuild_from(models.iter_pending())
    state.report.reindexed += count
    logger.warning("Redis had no schedule index; rebuilt %d entries from the table", count)


def _recover_leases(state: _Pass, queue: str) -> None:
    now = state.clock()
    for job in models.expired_leases(queue, now, SWEEP_LIMIT):
        if job.lost_leases + 1 >= MAX_LOST_LEASES:
            message = (
                f"lost: the run holding it died {job.lost_leases + 1} times while it ran; "
                "not retried (a poison job?)"
            )
            if models.finish(job.id, job.lease_token, Status.FAILED, message, now):
                state.report.failed += 1
                logger.error("job %d failed: %s", job.id, message)
            continue
        if models.reclaim(job, now):
            state.index.add(queue, job.id, now)
            state.report.recovered += 1
            logger.warning("job %d: lease lapsed (its run died); scheduled again", job.id)


def _reindex_orphans(state: _Pass, queue: str) -> None:
    overdue = models.overdue_pending(queue, state.clock() - ORPHAN_GRACE, SWEEP_LIMIT)
    due_by_id = dict(overdue)
    missing = state.index.missing(queue, list(due_by_id))
    if missing:
        state.index.add_many(queue, [(job_id, due_by_id[job_id]) for job_id in missing])
        state.report.reindexed += len(missing)
        logger.warning(
            "queue %s: re-indexed %d pending jobs the index had lost", queue, len(missing)
        )


def _drain(state: _Pass, queue: str) -> None:
    while not _should_stop(state):
        size = state.settings.batch_size
        if state.limits.limit is not None:
            size = min(size, state.limits.limit - state.calls)
        claimed = state.index.claim_due(queue, state.clock(), size)
        if not claimed:
            return
        state.report.claimed += len(claimed)
        _process_batch(state, queue, claimed)


def _should_stop(state: _Pass) -> bool:
    over_limit = state.limits.limit is not None and state.calls >= state.limits.limit
    over_time = time.monotonic() - state.started_at >= state.limits.max_seconds
    if over_limit or over_time:
        state.report.stopped_early = True
    return over_limit or over_time


def _process_batch(state: _Pass, queue: str, claimed: list[tuple[str, float]]) -> None:
    now = state.clock()
    due_by_id: dict[int, float] = {}
    for member, score in claimed:
        if member.isdigit():
            due_by_id[int(member)] = score
        else:
            state.report.dropped += 1
            logger.warning("queue %s: dropped index member %r: not a job id", queue, member)
    cutoff = now - state.limits.since
    missed = [job_id for job_id, due in due_by_id.items() if due < cutoff]
    _mark_missed(state, missed, now)
    runnable = [job_id for job_id, due in due_by_id.items() if due >= cutoff]
    rows = models.mark_running(runnable, state.token, now + state.settings.lease, now)
    state.report.dropped += len(runnable) - len(rows)
    rows.sort(key=lambda row: (due_by_id[row.id], row.id))
    for position, row in enumerate(rows):
        if _should_stop(state):
            _hand_back(state, queue, [later.id for later in rows[position:]])
            return
        _execute(state, row)


def _mark_missed(state: _Pass, ids: list[int], now: float) -> None:
    if not ids:
        return
    message = (
        f"missed: due more than {state.limits.since:g}s before the run at "
        f"{format_instant(now)}; `delayq retry ID` runs it"
    )
    count = models.mark_missed(ids, message, now)
    state.report.missed += count
    state.report.dropped += len(ids) - count
    logger.warning("%d jobs missed the run window (ids %s)", count, _preview(ids))


def _hand_back(state: _Pass, queue: str, ids: list[int]) -> None:
    now = state.clock()
    released = models.release(ids, state.token, now)
    state.index.add_many(queue, [(job_id, due or now) for job_id, due in released])


def _execute(state: _Pass, row: Job) -> None:
    state.calls += 1
    started = time.monotonic()
    try:
        class_path, method, data = _parse_params(row.params)
        handler = _handler(state, class_path, method)
    except HandlerNotAllowed as exc:
        _record_failure(state, row, ("?", "?"), str(exc), started, retry=False)
        return
    except BadInput as exc:
        _record_failure(state, row, ("?", "?"), str(exc), started, retry=_is_transient(exc))
        return
    try:
        result = handler(data)
    except NoRetry as exc:
        _record_failure(state, row, (class_path, method), _describe(exc), started, retry=False)
    except (Exception, SystemExit) as exc:  # a handler's error, however bad, never stops the run
        _record_failure(state, row, (class_path, method), _describe(exc), started, retry=True)
    else:
        _record_success(state, row, (class_path, method), result, started)


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


def _is_transient(exc: BadInput) -> bool:
    # A malformed row stays malformed; a missing module may be fixed by the next deploy.
    return not str(exc).startswith("bad params")


def _handler(state: _Pass, class_path: str, method: str) -> Handler:
    key = (class_path, method)
    if key not in state.handlers:
        try:
            state.handlers[key] = resolve(class_path, method, state.settings.handlers)
        except BadInput as exc:
            state.handlers[key] = exc
    found = state.handlers[key]
    if isinstance(found, Exception):
        raise found
    return found


def _record_success(
    state: _Pass, row: Job, call: tuple[str, str], result: Any, started: float
) -> None:
    message = _short_result(result)
    if not models.finish(row.id, state.token, Status.SUCCESS, message, state.clock()):
        logger.error("job %d succeeded but its lease had been taken over", row.id)
    state.report.succeeded += 1
    _emit(state, row, call, Status.SUCCESS, message, started, None)


def _record_failure(
    state: _Pass, row: Job, call: tuple[str, str], message: str, started: float, retry: bool
) -> None:
    now = state.clock()
    retry_id = None
    with Job._meta.database.atomic():
        if not models.finish(row.id, state.token, Status.FAILED, message, now):
            logger.error("job %d failed but its lease had been taken over", row.id)
            return
        if retry and should_retry(row.retry_times):
            retry_id = models.insert_retry(row, next_run_at(row.retry_times, now), now)
    if retry_id is not None:
        state.index.add(row.queue, retry_id, next_run_at(row.retry_times, now))
        state.report.retried += 1
    state.report.failed += 1
    _emit(state, row, call, Status.FAILED, message, started, retry_id)


def _emit(
    state: _Pass,
    row: Job,
    call: tuple[str, str],
    status: Status,
    message: str,
    started: float,
    retry_id: int | None,
) -> None:
    outcome = JobOutcome(
        row.id,
        row.queue,
        call[0],
        call[1],
        row.retry_times,
        status,
        message,
        time.monotonic() - started,
        retry_id,
    )
    logger.info(
        "job %d %s.%s attempt %d: %s in %.3fs%s",
        outcome.id,
        outcome.class_path,
        outcome.method,
        outcome.attempt,
        status.word,
        outcome.duration,
        f"; retry as job {retry_id}" if retry_id else "",
        extra={"job_outcome": outcome},  # logs.JsonLinesFormatter turns it into fields
    )
    if state.on_outcome is not None:
        state.on_outcome(outcome)


def _describe(exc: BaseException) -> str:
    try:
        text = str(exc)
    except Exception:  # noqa: BLE001 - a handler's exception may not even print
        text = "<unprintable>"
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__


def _short_result(result: Any) -> str:
    if result is None:
        return ""
    if isinstance(result, str):
        return result[: models.MESSAGE_MAX]
    try:
        return json.dumps(result, default=repr)[: models.MESSAGE_MAX]
    except (TypeError, ValueError):
        return repr(result)[: models.MESSAGE_MAX]


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
        interval = self.state.settings.lease / 3
        db = Job._meta.database
        while not self.stopped.wait(interval):
            try:
                models.renew_leases(
                    self.state.token, self.state.clock() + self.state.settings.lease
                )
            except Exception as exc:  # noqa: BLE001 - a missed beat only shortens the lease
                logger.warning("lease heartbeat failed: %s", exc)
        db.close()
