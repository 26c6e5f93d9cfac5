"""What a job is before it is a row: JobSpec, the checks every new job passes (handler
allowed and importable, JSON data within the size limit, a sane time, ext and queue) before
anything is written, the row it becomes, and the contract's view of a row on the way out."""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from ..base.durations import (
    FURTHEST_AHEAD,
    MAX_DURATION,
    YEAR,
    Duration,
    Instant,
    check_due,
    format_duration,
    instant_of,
    seconds_of,
)
from ..config import DEFAULT_QUEUE, Settings, validate_queue_name
from ..errors import BadInput
from ..flow.locking import check_lock
from ..store.table import (
    EXT_MAX,
    JobRow,
    Status,
    check_policy,
    failure_parts,
    may_nest_deeper,
    nests_deeper,
    parse_schedule,
    payload_or_empty,
    policy_text,
    stamp_epoch,
    status_word,
    too_deep,
    utc_stamp,
)
from ..worker.handlers import check_shape, locate

PARAMS_MAX_BYTES = 65535  # what a MySQL TEXT column holds
MIN_EVERY = 1.0


@dataclass(frozen=True)
class JobSpec:
    """One job to add: what to call, with what, when, under which business key."""

    class_path: str
    method: str
    data: Any = None
    delay: Duration | None = None
    at: Instant | None = None
    ext: str = ""
    queue: str = DEFAULT_QUEUE
    timeout: Duration | None = None  # how long the handler may run; None: DELAYQ_TIMEOUT
    every: Duration | None = None  # recurring: re-arm this long after each due time
    cron: str | None = None  # recurring: due at each match of this cron expression...
    tz: str | None = None  # ...read in this IANA time zone (default UTC)
    retries: int | None = None  # retries after failures; None: the handler's or the ladder's
    retry_delays: Sequence[Duration] | None = None  # the wait before each retry, in order
    lock: str | None = None  # jobs that share it never run at once, and run in due order


def to_row(
    spec: JobSpec,
    now: float,
    settings: Settings,
    located: set[tuple[str, str]],
    stamp: datetime | None = None,
    check: bool = True,
) -> dict[str, Any]:
    """The row a JobSpec becomes, or BadInput; `located` caches handlers already checked,
    `stamp` is `now` as a column (made once for many rows). `check=False` (a producer
    without the handlers' code) checks only the path's shape: the worker's allowlist
    decides at run, as for a job another producer INSERTs."""
    if not check:
        check_shape(spec.class_path, spec.method)
    elif (spec.class_path, spec.method) not in located:
        locate(spec.class_path, spec.method, settings.handlers)
        located.add((spec.class_path, spec.method))
    validate_queue_name(spec.queue)
    run_at, schedule = _timing(spec, now, settings.since)
    return {
        "params": encode_params(spec.class_path, spec.method, spec.data, check_lock(spec.lock)),
        "ext_string": check_ext(spec.ext),
        "queue": spec.queue,
        "timeout": check_timeout(spec.timeout),
        "every": check_every(spec.every),
        "run_at": run_at,
        "schedule": schedule,
        "retry_policy": _policy_column(spec),
        "status": Status.PENDING,
        "retry_times": 0,
        "created": stamp or utc_stamp(now),
        "modified": stamp or utc_stamp(now),
    }


def job_view(job: JobRow) -> dict[str, Any]:
    """The contract's JSON object for a job (a PHP producer's class as it wrote it); a
    failure's message is its head line, with the traceback the runner kept beside it."""
    payload = payload_or_empty(job.params)
    message, traceback = job.message, None
    if job.status == Status.FAILED:
        message, traceback = failure_parts(job.message)
    return {
        "id": job.id,
        "status": status_word(job.status),
        "retry_times": job.retry_times,
        "message": message,
        "traceback": traceback,
        "ext": job.ext_string,
        "run_at": job.run_at,
        "class": payload.get("class"),
        "method": payload.get("method"),
        "data": payload.get("data"),
        # How it recurs: its cron expression and zone, or `every 1h` as `--every` takes it.
        "schedule": job.schedule or (f"every {format_duration(job.every)}" if job.every else None),
        "every": job.every,
        "lock": payload.get("lock"),  # its lock key, or None
    }


def row_view(job: JobRow) -> dict[str, Any]:
    """`job_view` without the traceback, plus the queue, chain and when created and changed."""
    view = job_view(job)
    del view["traceback"]  # a list is one line per job; `show` has the traceback
    return dict(
        view,
        queue=job.queue,
        chain_id=job.chain_id,
        created=stamp_epoch(job.created),
        modified=stamp_epoch(job.modified),
    )


# One encoder for every job: json.dumps with options builds a new one per call, which
# showed at tens of thousands of jobs per add_many.
_PARAMS_ENCODER = json.JSONEncoder(ensure_ascii=False, allow_nan=False)


def encode_params(class_path: str, method: str, data: Any, lock: str | None = None) -> str:
    payload = {"class": class_path, "method": method, "data": data}
    if lock is not None:
        payload["lock"] = lock
    try:
        text = _PARAMS_ENCODER.encode(payload)
    except RecursionError:
        raise BadInput(f"{too_deep()}; flatten it") from None
    except (TypeError, ValueError) as exc:
        raise BadInput(f"data is not JSON-serialisable: {exc}") from None
    if may_nest_deeper(text) and nests_deeper(data):
        raise BadInput(f"{too_deep()}; flatten it")
    try:
        # ASCII text (most params) is as many bytes as characters, and holds no lone surrogate.
        size = len(text) if text.isascii() else len(text.encode("utf-8"))
    except UnicodeEncodeError:
        raise BadInput("data contains text that is not valid UTF-8") from None
    if size > PARAMS_MAX_BYTES:
        raise BadInput(f"job payload is {size} bytes; the limit is {PARAMS_MAX_BYTES}")
    return text


def check_ext(ext: str) -> str:
    if not isinstance(ext, str):
        raise BadInput("ext must be text")
    try:
        ext.encode("utf-8")
    except UnicodeEncodeError:
        raise BadInput("ext is not valid UTF-8") from None
    if len(ext) > EXT_MAX:
        raise BadInput(f"ext is {len(ext)} characters; the limit is {EXT_MAX}")
    return ext


def check_key(ext: str) -> str:
    """`ext` as a key that selects jobs: never empty, because every job added without one
    has the empty key, and an unset shell variable would then cancel them all."""
    if ext == "":
        raise BadInput("--ext is empty; name the business key of the jobs to cancel")
    return check_ext(ext)


def check_every(every: Duration | None) -> float | None:
    if every is None:
        return None
    every = seconds_of(every, "--every")
    if not MIN_EVERY <= every <= FURTHEST_AHEAD:
        raise BadInput(
            f"--every must be between {MIN_EVERY:g} second and "
            f"{FURTHEST_AHEAD // YEAR} years, not {every}"
        )
    return every


def _policy_column(spec: JobSpec) -> str | None:
    if spec.retries is None and spec.retry_delays is None:
        return None  # no policy of its own, the column's NULL: most jobs, skipping the checks
    return policy_text(check_policy(spec.retries, spec.retry_delays))


def _timing(spec: JobSpec, now: float, since: float | None) -> tuple[float, str | None]:
    """The row's `run_at` and `schedule`. With a cron schedule the job is due at its first
    match after now, or, given a delay or an `at`, at its first match from then on."""
    if spec.cron is None:
        if spec.tz is not None:
            raise BadInput("--tz needs --cron: the zone a cron expression is read in")
        return run_at_of(spec.delay, spec.at, now, since), None
    if spec.every is not None:
        raise BadInput("give --every or --cron, not both")
    schedule = parse_schedule(spec.cron, spec.tz)
    if spec.delay is None and spec.at is None:
        run_at = schedule.first_after(now)
    else:
        run_at = schedule.first_from(run_at_of(spec.delay, spec.at, now, since))
    return check_due(run_at, now, "--cron"), schedule.column


def check_timeout(timeout: Duration | None, name: str = "timeout") -> float | None:
    """`timeout` in seconds if a handler can be given it; `name` is how the user wrote it."""
    if timeout is None:
        return None
    timeout = seconds_of(timeout, name)
    if not 0 < timeout <= MAX_DURATION:
        raise BadInput(
            f"{name} must be a positive number of seconds, at most {MAX_DURATION // YEAR} years,"
            f" not {timeout:g}"
        )
    return timeout


def run_at_of(
    delay: Duration | None, at: Instant | None, now: float, since: float | None = None
) -> float:
    """The due time of a new job, no further ahead than a job may be due (check_due) and,
    given the run's window `since`, not so far past that a run could only mark it missed."""
    if delay is not None and at is not None:
        raise BadInput("give delay= or at=, not both")
    if at is not None:
        return check_at(at, now, since, "at=")
    seconds = 0.0 if delay is None else seconds_of(delay, "delay")
    if seconds < 0:
        raise BadInput(f"delay must be a non-negative number of seconds, not {seconds}")
    return check_due(now + seconds, now, f"delay {seconds:g}s")


def check_at(at: Instant, now: float, since: float | None, name: str) -> float:
    """Epoch seconds of `at`, refused further ahead than a job may be due, or before the run's
    window `since` (the job could only end missed); `name` is how the user wrote it: `at=` or
    `--at`."""
    run_at = check_due(instant_of(at, name), now, name)
    if since is not None and run_at < now - since:
        raise BadInput(
            f"{name} is more than {format_duration(since)} (DELAYQ_SINCE) ago, before the window "
            "a run looks back over, so the job could only end missed; give a later time"
        )
    return run_at
