"""The `delayq` command: one typer function per command; with cli_ops.py (the operator's
commands, registered on the same app) the only modules that print or choose an exit code.

stdout carries results only (an id, a count, a JSON object); diagnostics go to stderr, and
`delayq run` prints nothing when all is well because cron mails whatever it prints.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer

if TYPE_CHECKING:
    from .queue import Queue
    from .report import JobOutcome, RunReport

from .durations import format_instant, parse_duration, parse_instant
from .errors import BackendUnavailable, BadInput, ConfigError, DelayqError, JobNotFound
from .interrupts import graceful_stop
from .logs import setup_logging

app = typer.Typer(
    add_completion=False,
    no_args_is_help=True,
    pretty_exceptions_enable=False,
    help="Durable delayed jobs on MySQL + Redis, driven by cron.",
)

PROGRESS_MIN_JOBS = 50  # a bar for a handful of jobs is noise

EXIT_CODES: dict[type[DelayqError], int] = {
    BadInput: 2,
    ConfigError: 2,
    JobNotFound: 1,
    BackendUnavailable: 1,
}

QueueOption = Annotated[str, typer.Option("--queue", "-q", help="Queue name.")]
JsonOption = Annotated[bool, typer.Option("--json", help="Print one JSON object.")]
DelayOption = Annotated[
    str | None, typer.Option("--delay", help="Wait this long: seconds, or 90s, 15m, 2h, 1d.")
]


def exit_code(exc: DelayqError) -> int:
    """The exit code for an expected error: 2 bad input, 1 unknown id or unreachable backend."""
    for cls in type(exc).__mro__:
        if cls in EXIT_CODES:
            return EXIT_CODES[cls]
    return 1


@contextmanager
def reporting_errors() -> Iterator[None]:
    """Turn a DelayqError into one line on stderr and its exit code; never a traceback."""
    try:
        yield
    except DelayqError as exc:
        typer.echo(f"delayq: error: {exc}", err=True)
        raise typer.Exit(exit_code(exc)) from None


def _queue() -> Queue:
    from .queue import connect  # imported here so `delayq --help` stays fast

    return connect()


def _print_json(obj: Any) -> None:
    typer.echo(json.dumps(obj, sort_keys=True))


@app.command()
def init() -> None:
    """Create the delay_queue table and the schedule index; safe to run again."""
    with reporting_errors():
        queue = _queue()
        for change in queue.init():
            typer.echo(f"added {change}")
        typer.echo(f"initialised {queue.describe()}")


@app.command()
def add(
    class_path: Annotated[str, typer.Argument(metavar="CLASS", help="Dotted class or module.")],
    method: Annotated[str, typer.Argument(help="Method or function to call.")],
    data: Annotated[str, typer.Option("--data", help="JSON passed to the handler.")] = "null",
    delay: DelayOption = None,
    at: Annotated[str | None, typer.Option("--at", help="Due time, ISO 8601.")] = None,
    ext: Annotated[str, typer.Option("--ext", help="Business key for lookup and cancel.")] = "",
    queue_name: QueueOption = "default",
    timeout: Annotated[
        str | None, typer.Option("--timeout", help="Time limit for the handler (default 5m).")
    ] = None,
    every: Annotated[
        str | None,
        typer.Option("--every", help="Recurring: run again this long after each due time."),
    ] = None,
    replace: Annotated[
        bool, typer.Option("--replace", help="Move the pending job with this --ext instead.")
    ] = False,
) -> None:
    """Schedule CLASS.METHOD(data); prints the new job id."""
    with reporting_errors():
        payload = _parse_json(data)
        job_id = _queue().add(
            class_path,
            method,
            payload,
            delay=_duration_or_none(delay, "--delay"),
            at=parse_instant(at) if at is not None else None,
            ext=ext,
            queue=queue_name,
            timeout=_duration_or_none(timeout, "--timeout"),
            every=_duration_or_none(every, "--every"),
            replace=replace,
        )
        typer.echo(job_id)


@app.command()
def run(
    since: Annotated[
        str | None, typer.Option("--since", help="Look back this far (default 1d).")
    ] = None,
    limit: Annotated[int | None, typer.Option("--limit", help="Run at most N jobs.")] = None,
    max_seconds: Annotated[
        str | None, typer.Option("--max-seconds", help="Claim nothing new after this long.")
    ] = None,
    queues: Annotated[
        list[str] | None, typer.Option("--queue", "-q", help="Only these queues.")
    ] = None,
    loop: Annotated[
        bool, typer.Option("--loop", help="Stay up, starting each job as it falls due.")
    ] = False,
    loop_for: Annotated[
        str | None, typer.Option("--for", help="With --loop: stop after this long.")
    ] = None,
    verbose: Annotated[bool, typer.Option("--verbose", "-v", help="One line per job.")] = False,
    metrics_file: Annotated[
        Path | None, typer.Option("--metrics-file", help="Write Prometheus metrics here.")
    ] = None,
    log_file: Annotated[
        Path | None, typer.Option("--log-file", help="Append log records here, not stderr.")
    ] = None,
    log_level: Annotated[
        str, typer.Option("--log-level", help="debug, info (a line per job), warning, error.")
    ] = "warning",
    log_json: Annotated[bool, typer.Option("--log-json", help="One JSON object a line.")] = False,
) -> None:
    """Run the due jobs once (or, with --loop, as they fall due); silent when all is well."""
    with reporting_errors():
        setup_logging(log_level, log_file, log_json)
        options: dict[str, Any] = {
            "since": parse_duration(since, "--since") if since is not None else None,
            "limit": limit,
            "max_seconds": _duration_or_none(max_seconds, "--max-seconds"),
            "queues": queues,
            "on_outcome": _print_outcome if verbose else None,
        }
        duration = _duration_or_none(loop_for, "--for")
        if duration is not None and not loop:
            raise BadInput("--for needs --loop")
        queue = _queue()
        with graceful_stop() as stop, _progress(queue, verbose and not loop, queues) as bar:
            if bar is not None:
                options["on_outcome"] = bar
            if loop:
                report = queue.run_loop(duration=duration, stop=stop, **options)
            else:
                report = queue.run(stop=stop, **options)
        if metrics_file is not None:
            from .metrics import write_metrics  # prometheus_client only when asked for

            write_metrics(metrics_file, report, queue.status().queues)
        if verbose:
            typer.echo(_summary(report))
    if report.interrupted is not None:
        raise typer.Exit(128 + report.interrupted)


def _duration_or_none(text: str | None, name: str) -> float | None:
    return parse_duration(text, name) if text is not None else None


def _summary(report: RunReport) -> str:
    jobs = "job" if report.ran == 1 else "jobs"
    return (
        f"ran {report.ran} {jobs}: {report.succeeded} succeeded, {report.failed} failed "
        f"({report.retried} retried), {report.missed} missed, {report.dropped} dropped, "
        f"{report.recovered} recovered, {report.reindexed} re-indexed in {report.elapsed:.2f}s"
    )


def _print_outcome(outcome: JobOutcome) -> None:
    typer.echo(_outcome_line(outcome))


def _outcome_line(outcome: JobOutcome) -> str:
    message = f" {outcome.message}" if outcome.message else ""
    retry = " (will retry)" if outcome.will_retry else ""
    return (
        f"{outcome.id} {outcome.class_path}.{outcome.method} attempt {outcome.attempt} "
        f"{outcome.status.word} {outcome.duration * 1000:.1f}ms{message}{retry}"
    )


@contextmanager
def _progress(
    queue: Queue, wanted: bool, queues: list[str] | None
) -> Iterator[Callable[[JobOutcome], None] | None]:
    """On a terminal, `run -v` over a backlog shows a progress bar under the job lines;
    never in cron, which has no terminal."""
    due = queue.due_count(queues) if wanted and sys.stdout.isatty() else 0
    if due < PROGRESS_MIN_JOBS:
        yield None
        return
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TimeRemainingColumn

    columns = (BarColumn(), MofNCompleteColumn(), TimeRemainingColumn())
    with Progress(*columns, transient=True) as progress:
        task = progress.add_task("run", total=due)

        def advance(outcome: JobOutcome) -> None:
            progress.console.print(_outcome_line(outcome), markup=False, highlight=False)
            progress.advance(task)

        yield advance


@app.command()
def reconcile() -> None:
    """Compare the index with the table both ways and fix what differs; prints what it did."""
    with reporting_errors():
        result = _queue().reconcile()
        names = sorted(set(result.reindexed) | set(result.removed))
        for name in names:
            typer.echo(
                f"{name}: re-indexed {result.reindexed[name]}, removed {result.removed[name]}"
            )
        if not names:
            typer.echo("nothing to do")


@app.command()
def cancel(
    job_id: Annotated[int | None, typer.Argument(metavar="[ID]", help="Job id.")] = None,
    ext: Annotated[
        str | None, typer.Option("--ext", help="Cancel every pending job with this key.")
    ] = None,
    queue_name: Annotated[
        str | None, typer.Option("--queue", "-q", help="Only this queue.")
    ] = None,
) -> None:
    """Cancel a pending job by id, or every pending job with --ext; prints the count."""
    with reporting_errors():
        typer.echo(_queue().cancel(job_id, ext=ext, queue=queue_name))


@app.command()
def retry(
    job_id: Annotated[int, typer.Argument(metavar="ID", help="Job id.")],
    delay: DelayOption = None,
) -> None:
    """Run a finished job again as a new attempt; prints the new id."""
    with reporting_errors():
        delay_seconds = parse_duration(delay, "--delay") if delay is not None else 0.0
        typer.echo(_queue().retry(job_id, delay=delay_seconds))


@app.command()
def show(
    job_id: Annotated[int, typer.Argument(metavar="ID", help="Job id.")],
    as_json: JsonOption = False,
) -> None:
    """One job, with its retry chain."""
    with reporting_errors():
        queue = _queue()
        view = queue.show(job_id)
        if as_json:
            _print_json(view)
            return
        for key in ("id", "status", "class", "method", "ext", "retry_times", "message"):
            typer.echo(f"{key:<12}{'' if view[key] is None else view[key]}")
        typer.echo(f"{'data':<12}{json.dumps(view['data'], ensure_ascii=False)}")
        typer.echo(f"{'run_at':<12}{format_instant(view['run_at'])}")
        chain = queue.history(job_id)
        if len(chain) > 1:
            steps = " -> ".join(f"{step['id']} {step['status']}" for step in chain)
            typer.echo(f"{'attempts':<12}{steps}")


@app.command("embedded-stop")
def embedded_stop() -> None:
    """Stop the embedded Redis server under DELAYQ_HOME (its data stays on disk)."""
    from . import embedded
    from .config import load_settings

    with reporting_errors():
        stopped = embedded.stop(load_settings().home)
        typer.echo("stopped" if stopped else "not running")


def _parse_json(text: str) -> Any:
    try:
        return json.loads(text)
    except ValueError as exc:
        raise BadInput(f"--data is not valid JSON: {exc}") from None


def main() -> None:
    """Console-script entry point."""
    setup_logging()
    if sys.argv[1:2] == ["run"]:
        # Cron starts `delayq run` every minute (loop.sh every few seconds): build only that
        # command instead of the whole app, whose sixteen commands typer would inspect first.
        single = typer.Typer(add_completion=False, pretty_exceptions_enable=False)
        single.command()(run)
        single(args=sys.argv[2:], prog_name=f"{_program_name()} run")
        return
    app()


def _program_name() -> str:
    name = Path(sys.argv[0]).name
    return "delayq" if name in ("__main__.py", "-c") else name


# The operator's commands live in cli_ops.py; importing it registers them on `app`.
from . import cli_ops  # noqa: E402, F401
