"""The commands application code and scripts use: add, cancel, retry, show."""

from __future__ import annotations

import json
import time
from typing import Annotated, Any

import typer

from ..base.durations import format_instant, parse_duration, shown
from ..config import DEFAULT_QUEUE
from ..errors import BadInput
from ..jobs.spec import check_at, check_timeout
from ..store.index import UNREADABLE
from .app import (
    Command,
    JsonOption,
    OptionalQueue,
    QueueOption,
    app,
    open_queue,
    print_json,
    printable,
)

DelayOption = Annotated[
    str | None, typer.Option("--delay", help="Wait this long: seconds, or 90s, 15m, 2h, 1d.")
]


@app.command(cls=Command)
def add(
    class_path: Annotated[str, typer.Argument(metavar="CLASS", help="Dotted class or module.")],
    method: Annotated[str, typer.Argument(metavar="METHOD", help="Method or function to call.")],
    data: Annotated[str, typer.Option("--data", help="JSON passed to the handler.")] = "null",
    delay: DelayOption = None,
    at: Annotated[
        str | None,
        typer.Option(
            "--at", help="Due time, ISO 8601 with its zone: 2026-11-25T20:00:00Z or ...+09:00."
        ),
    ] = None,
    ext: Annotated[str, typer.Option("--ext", help="Business key for lookup and cancel.")] = "",
    queue_name: QueueOption = DEFAULT_QUEUE,
    timeout: Annotated[
        str | None, typer.Option("--timeout", help="Time limit for the handler (default 5m).")
    ] = None,
    every: Annotated[
        str | None,
        typer.Option("--every", help="Recurring: run again this long after each due time."),
    ] = None,
    cron: Annotated[
        str | None,
        typer.Option("--cron", help='Recurring: due at each match, e.g. "0 9 * * MON-FRI".'),
    ] = None,
    tz: Annotated[
        str | None, typer.Option("--tz", help="Time zone --cron is read in (default UTC).")
    ] = None,
    replace: Annotated[
        bool, typer.Option("--replace", help="Move the pending job with this --ext instead.")
    ] = False,
    retries: Annotated[
        str | None, typer.Option("--retries", help="Retries after failures (0: none).")
    ] = None,
    retry_delays: Annotated[
        str | None, typer.Option("--retry-delays", help="Waits before each retry, e.g. 10s,1m,5m.")
    ] = None,
    lock: Annotated[
        str | None,
        typer.Option("--lock", metavar="KEY", help="Never run at once with jobs of this lock."),
    ] = None,
    as_json: Annotated[
        bool, typer.Option("--json", help="Print the job as one JSON object, not just its id.")
    ] = False,
) -> None:
    """Schedule CLASS.METHOD(data); prints the new job id."""
    payload = parse_json(data)
    if delay is not None and at is not None:
        raise BadInput("give --delay or --at, not both")
    queue = open_queue()
    # Checked here too, so that its errors name --at, not the API's at=.
    due_at = None if at is None else check_at(at, time.time(), queue.settings.since, "--at")
    job_id = queue.add(
        class_path,
        method,
        payload,
        delay=duration_or_none(delay, "--delay"),
        at=due_at,
        ext=ext,
        queue=queue_name,
        timeout=check_timeout(duration_or_none(timeout, "--timeout"), "--timeout"),
        every=duration_or_none(every, "--every"),
        cron=cron,
        tz=tz,
        retries=whole_or_none(retries, "--retries"),
        retry_delays=None if retry_delays is None else retry_delays.split(","),
        replace=replace,
        lock=lock,
    )
    if as_json:
        print_json({**queue.show(job_id), "queue": queue_name})
    else:
        typer.echo(job_id)


@app.command(cls=Command)
def cancel(
    job_id: Annotated[int | None, typer.Argument(metavar="ID", help="Job id.")] = None,
    ext: Annotated[
        str | None, typer.Option("--ext", help="Cancel every pending job with this key.")
    ] = None,
    queue_name: OptionalQueue = None,
) -> None:
    """Cancel a pending job by id, or every pending job with --ext; prints the count (a job
    no longer pending: 0, and its status on stderr)."""
    queue = open_queue()
    count = queue.cancel(job_id, ext=ext, queue=queue_name)
    typer.echo(count)
    if job_id is not None and not count:
        state = queue.show(job_id)["status"]
        typer.echo(f"delayq: job {job_id} is {state}, not pending; nothing cancelled", err=True)


@app.command(cls=Command)
def retry(
    job_id: Annotated[int, typer.Argument(metavar="ID", help="Job id.")],
    delay: DelayOption = None,
) -> None:
    """Run a job again now (or after --delay): its chain's pending attempt is moved, or a
    finished chain gets a new attempt; prints that attempt's id."""
    typer.echo(open_queue().retry(job_id, delay=duration_or_none(delay, "--delay") or 0.0))


@app.command(cls=Command)
def show(
    job_id: Annotated[int, typer.Argument(metavar="ID", help="Job id.")],
    as_json: JsonOption = False,
) -> None:
    """One job, with its retry chain."""
    queue = open_queue()
    view = queue.show(job_id)
    if as_json:
        print_json(view)
        return
    for key in ("id", "status", "class", "method", "ext", "retry_times", "message"):
        value = view[key]
        if key in ("class", "method") and not isinstance(value, str):
            value = UNREADABLE  # params that name none: not JSON, not an object, no such key
        typer.echo(f"{key:<12}{printable(value)}")
    typer.echo(f"{'data':<12}{printable(json.dumps(view['data'], ensure_ascii=False))}")
    typer.echo(f"{'run_at':<12}{format_instant(view['run_at'])}")
    if view["schedule"] is not None:
        typer.echo(f"{'schedule':<12}{printable(view['schedule'])}")
    chain = queue.history(job_id)
    if len(chain) > 1:
        steps = " -> ".join(f"{step['id']} {step['status']}" for step in chain)
        typer.echo(f"{'attempts':<12}{steps}")
    if view["traceback"]:  # last: the innermost frame, where it failed, ends the output
        typer.echo("traceback")
        for line in view["traceback"].splitlines():
            typer.echo(f"  {printable(line)}")


def duration_or_none(text: str | None, name: str) -> float | None:
    return parse_duration(text, name) if text is not None else None


def whole_or_none(text: str | None, name: str) -> int | None:
    """A whole number given as text, read here so a bad one is delayq's one-line error."""
    if text is None:
        return None
    digits = text.strip()
    if digits.startswith("-") and digits[1:].isascii() and digits[1:].isdigit():
        raise BadInput(f"{name} {shown(text)} is negative; give 0 or more")
    if not (digits.isascii() and digits.isdigit()) or len(text) > 9:
        raise BadInput(f"{name} must be a whole number, not {shown(text)}")
    return int(text)


def parse_json(text: str) -> Any:
    try:
        return json.loads(text)
    except RecursionError:
        raise BadInput("--data nests lists and objects too deeply; flatten it") from None
    except ValueError as exc:
        raise BadInput(f"--data is not valid JSON: {exc}") from None
