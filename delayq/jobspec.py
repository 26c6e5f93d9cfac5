"""What a job is before it is a row: JobSpec, the checks every new job passes (handler
allowed and importable, JSON data within the size limit, a sane time, ext and queue), the
row it becomes, and the contract's view of a row on the way out.

Every check runs before anything is written, so bad input leaves no trace.
"""

from __future__ import annotations

import json
import math
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from .config import DEFAULT_QUEUE, validate_queue_name
from .durations import HORIZON, MAX_DURATION, YEAR, check_due
from .errors import BadInput
from .store import table
from .store.params import may_nest_deeper, nests_deeper, payload_or_empty, too_deep
from .store.table import Job, Status
from .worker.handlers import locate

PARAMS_MAX_BYTES = 65535  # what a MySQL TEXT column holds
MIN_EVERY = 1.0


@dataclass(frozen=True)
class JobSpec:
    """One job to add: what to call, with what, when, under which business key."""

    class_path: str
    method: str
    data: Any = None
    delay: float | None = None
    at: float | None = None
    ext: str = ""
    queue: str = DEFAULT_QUEUE
    timeout: float | None = None  # seconds the handler may run; None: DELAYQ_TIMEOUT
    every: float | None = None  # recurring: re-arm this many seconds after each due time


def to_row(
    spec: JobSpec,
    now: float,
    allowed: Sequence[str],
    located: set[tuple[str, str]],
    stamp: datetime | None = None,
) -> dict[str, Any]:
    """The row a JobSpec becomes, or BadInput; `located` caches handlers already checked,
    `stamp` is `now` as created/modified (computed once for many rows)."""
    if (spec.class_path, spec.method) not in located:
        locate(spec.class_path, spec.method, allowed)
        located.add((spec.class_path, spec.method))
    validate_queue_name(spec.queue)
    return {
        "params": encode_params(spec.class_path, spec.method, spec.data),
        "ext_string": check_ext(spec.ext),
        "queue": spec.queue,
        "run_at": run_at_of(spec.delay, spec.at, now),
        "timeout": check_timeout(spec.timeout),
        "every": check_every(spec.every),
        "status": Status.PENDING,
        "retry_times": 0,
        "created": stamp or table.utc_stamp(now),
        "modified": stamp or table.utc_stamp(now),
    }


def job_view(job: Job) -> dict[str, Any]:
    """The contract's JSON object for a job (a PHP producer's class as it wrote it)."""
    payload = payload_or_empty(job.params)
    return {
        "id": job.id,
        "status": table.status_word(job.status),
        "retry_times": job.retry_times,
        "message": job.message,
        "ext": job.ext_string,
        "run_at": job.run_at,
        "class": payload.get("class"),
        "method": payload.get("method"),
        "data": payload.get("data"),
    }


def row_view(job: Job) -> dict[str, Any]:
    """`job_view` plus where the row sits: queue, chain and when it was created and changed."""
    from .ops import overview

    return dict(
        job_view(job),
        queue=job.queue,
        chain_id=job.chain_id,
        created=overview.epoch_of(job.created),
        modified=overview.epoch_of(job.modified),
    )


# One encoder for every job: json.dumps with options builds a new one per call, which
# showed at tens of thousands of jobs per add_many.
_PARAMS_ENCODER = json.JSONEncoder(ensure_ascii=False, allow_nan=False)


def encode_params(class_path: str, method: str, data: Any) -> str:
    try:
        text = _PARAMS_ENCODER.encode({"class": class_path, "method": method, "data": data})
    except RecursionError:
        raise BadInput(f"{too_deep()}; flatten it") from None
    except (TypeError, ValueError) as exc:
        raise BadInput(f"data is not JSON-serialisable: {exc}") from None
    if may_nest_deeper(text) and nests_deeper(data):
        raise BadInput(f"{too_deep()}; flatten it")
    try:
        size = len(text.encode("utf-8"))
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
    if len(ext) > table.EXT_MAX:
        raise BadInput(f"ext is {len(ext)} characters; the limit is {table.EXT_MAX}")
    return ext


def check_key(ext: str) -> str:
    """`ext` as a key that selects jobs: never empty, because every job added without one
    has the empty key, and an unset shell variable would then cancel them all."""
    if ext == "":
        raise BadInput("--ext is empty; name the business key of the jobs to cancel")
    return check_ext(ext)


def check_every(every: float | None) -> float | None:
    if every is None:
        return None
    every = _number(every, "--every")
    if not math.isfinite(every) or not MIN_EVERY <= every <= HORIZON:
        raise BadInput(
            f"--every must be between {MIN_EVERY:g} second and {HORIZON // YEAR} years, not {every}"
        )
    return every


def check_timeout(timeout: float | None) -> float | None:
    if timeout is None:
        return None
    timeout = _number(timeout, "timeout")
    if not math.isfinite(timeout) or not 0 < timeout <= MAX_DURATION:
        raise BadInput(
            f"timeout must be a positive number of seconds, at most {MAX_DURATION // YEAR} years,"
            f" not {timeout}"
        )
    return timeout


def run_at_of(delay: float | None, at: float | None, now: float) -> float:
    """The due time of a new job, within the horizon durations.check_due allows."""
    if delay is not None and at is not None:
        raise BadInput("give a delay or an --at time, not both")
    if at is not None:
        return check_due(_number(at, "--at"), now, "--at")
    delay = 0.0 if delay is None else _number(delay, "delay")
    if not math.isfinite(delay) or delay < 0:
        raise BadInput(f"delay must be a non-negative number of seconds, not {delay}")
    return check_due(now + delay, now, f"delay {delay:g}s")


def _number(value: Any, name: str) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise BadInput(f"{name} must be a number of seconds, not {value!r}")
    try:
        return float(value)
    except OverflowError:  # an int too large for a float
        raise BadInput(f"{name} {value} is out of range") from None
