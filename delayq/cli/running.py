"""`delayq run`, the command cron starts every minute: silent when all is well, one line
per job with -v (a JSON object with --json), a progress bar on a terminal."""

from __future__ import annotations

import sys
from collections.abc import Iterator
from contextlib import AbstractContextManager, contextmanager, nullcontext
from dataclasses import asdict, dataclass
from functools import partial
from typing import TYPE_CHECKING, Annotated

import typer

from ..base.durations import parse_duration
from ..config import load_settings
from ..errors import BadInput, DelayqError
from ..ops.logs import job_fields, setup_logging
from ..worker.allowlist import check_allowlist
from ..worker.handlers import check_imports
from ..worker.interrupts import graceful_stop
from ..worker.options import RunOptions
from .app import app, open_queue, print_json, printable

if TYPE_CHECKING:
    from ..config import Settings
    from ..queue import Queue
    from ..store.table import Outcome
    from ..worker.liveness import Liveness
    from ..worker.report import OutcomeCallback, RunReport

PROGRESS_MIN_JOBS = 50  # a bar for a handful of jobs is noise
MAX_PROCESSES = 64


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
    as_json: Annotated[
        bool, typer.Option("--json", help="With -v: a JSON object per job and one to sum up.")
    ] = False,
    # Paths taken as text: typer's Path type raises on a NUL before delayq can refuse it.
    metrics_file: Annotated[
        str | None, typer.Option("--metrics-file", help="Write Prometheus metrics here.")
    ] = None,
    metrics_interval: Annotated[
        str, typer.Option("--metrics-interval", help="With --loop, rewrite the metrics this often.")
    ] = "15s",
    log_file: Annotated[
        str | None, typer.Option("--log-file", help="Append log records here, not stderr.")
    ] = None,
    log_level: Annotated[
        str, typer.Option("--log-level", help="debug, info (a line per job), warning, error.")
    ] = "warning",
    log_json: Annotated[bool, typer.Option("--log-json", help="One JSON object a line.")] = False,
    on_failure: Annotated[
        str | None,
        typer.Option("--on-failure", help="Call this function (a dotted path) on each failure."),
    ] = None,
    concurrency: Annotated[
        int | None, typer.Option("--concurrency", "-c", help="Jobs in flight at once (default 1).")
    ] = None,
    grace: Annotated[
        str | None,
        typer.Option("--grace", help="On SIGTERM, let jobs in flight finish this long (25s)."),
    ] = None,
    processes: Annotated[
        int, typer.Option("--processes", "-p", help="Runner processes under one parent.")
    ] = 1,
    weighted: Annotated[
        str | None, typer.Option("--queues", help="Queues served in turn, batches a turn: a:3,b:1.")
    ] = None,
    liveness_fd: Annotated[
        int | None,
        typer.Option("--liveness-fd", hidden=True, help="Beat on this pipe (--processes)."),
    ] = None,
) -> None:
    """Run the due jobs once (or, with --loop, as they fall due); silent when all is well."""
    if not 1 <= processes <= MAX_PROCESSES:
        raise BadInput(f"--processes must be between 1 and {MAX_PROCESSES}")
    printer = _job_printer(verbose, as_json)  # first: a refusal leaves no log file behind
    interval = parse_duration(metrics_interval, "--metrics-interval")
    if interval < 1:
        raise BadInput(f"--metrics-interval must be at least 1s, not {metrics_interval!r}")
    outputs = Outputs(
        verbose, as_json, log_file, log_level, log_json, metrics_file, interval, on_failure
    )
    # The log opened and the metrics file checked before any job runs: a run that found
    # out only afterwards had run its jobs and still exited 2.
    setup_logging(log_level, log_file, log_json)
    if metrics_file is not None:
        from ..ops.textfile import check_writable

        check_writable(metrics_file)
    weights = parse_weighted(weighted) if weighted is not None else {}
    options = RunOptions.build(
        queues=[*(queues or ()), *weights],
        weights=weights,
        limit=limit,
        since=since,
        max_seconds=max_seconds,
        concurrency=concurrency,
        grace=grace,
        loop=loop,
        duration=loop_for,
    )
    if processes != 1:
        _supervise(processes, options, outputs)
    report = _run_here(options, outputs, printer, liveness_fd)
    if report.interrupted is not None:
        raise typer.Exit(128 + report.interrupted)
    if report.stuck:
        raise DelayqError(
            f"{report.stuck} handler threads are stuck past their time limit; "
            "the run stopped so that a fresh process takes over"
        )


@dataclass(frozen=True)
class Outputs:
    """What `delayq run` was asked besides the run's own options: what it prints, logs and
    writes as metrics, and the hook it calls on a failure."""

    verbose: bool
    as_json: bool
    log_file: str | None
    log_level: str
    log_json: bool
    metrics_file: str | None
    metrics_interval: float  # seconds; at least 1, so never written with an exponent
    on_failure: str | None

    def argv(self) -> list[str]:
        """These as `delayq run` flags (each field's name, but --json), which the command reads
        back into equal Outputs."""
        flags: list[str] = []
        for name, value in asdict(self).items():
            flag = "--json" if name == "as_json" else "--" + name.replace("_", "-")
            if isinstance(value, bool):
                flags += [flag] * value
            elif value is not None:
                flags.append(f"{flag}={value}")
        return flags


def _run_here(
    options: RunOptions, outputs: Outputs, printer: OutcomeCallback | None, liveness_fd: int | None
) -> RunReport:
    liveness = _liveness(liveness_fd)
    _check_handlers(load_settings())
    # Closed as the run ends: the runner's `on_shutdown` functions run, then its event loop
    # closes.
    with open_queue(create=True, on_failure=outputs.on_failure) as queue:
        if liveness is None and options.queues:  # a `--processes` child's parent warned
            _warn_of_unused(queue, options)
        with (
            graceful_stop() as stop,
            _progress(queue, options, outputs) as bar,
            _rewriting(queue, options, outputs),
        ):
            on_outcome = printer if bar is None else bar
            report = queue.run_with(options, on_outcome=on_outcome, stop=stop, liveness=liveness)
        if outputs.metrics_file is not None:
            from ..ops.textfile import write_file  # prometheus_client only when asked for

            write_file(outputs.metrics_file, queue.metrics(report))
    if outputs.verbose:
        _print_summary(report, outputs.as_json)
    return report


def _check_handlers(settings: Settings) -> None:
    """Refuse an allowlist that is empty, names code not the application's, or has an entry
    that does not import here: each would fail every due job the run claims."""
    check_allowlist(settings.handlers)
    check_imports(settings.handlers, settings.path)


def _supervise(processes: int, options: RunOptions, outputs: Outputs) -> None:
    """Run `processes` children with this command's own options, and exit as they do."""
    from ..worker.hooks import load_reporters  # imports handler code: only for -p

    # Refused once here, rather than by every child on its own line.
    settings = load_settings().with_overrides(on_failure=outputs.on_failure)
    _check_handlers(settings)
    load_reporters(settings)
    if options.loop or options.queues:
        with open_queue(create=True, on_failure=outputs.on_failure) as queue:
            if options.loop:  # a looping child waits out an outage, even one at its start
                queue.reach()  # so a wrong URL is said once, here, and at once
            _warn_of_unused(queue, options)  # here, once: the children find the names noted
    from ..worker.processes import Supervisor

    child = [sys.executable, "-m", "delayq", "run", *options.argv(), *outputs.argv()]
    raise typer.Exit(Supervisor(lambda fd: [*child, "--liveness-fd", str(fd)], processes).run())


def _warn_of_unused(queue: Queue, options: RunOptions) -> None:
    """One line for each queue named that no job has used: a typo would otherwise idle for
    ever without a word. The run goes on (a queue may get jobs later); noting the names
    makes `status` list them, and the next run silent."""
    for name in queue.serve(options.queues):
        typer.echo(
            f"delayq: warning: no job has used queue {printable(repr(name))} yet; serving it "
            "(check the name: jobs added to it from now on will run)",
            err=True,
        )


def _liveness(fd: int | None) -> Liveness | None:
    """A child of `--processes` beats on the pipe its parent gave it."""
    if fd is None:
        return None
    from ..worker.liveness import Liveness

    try:
        return Liveness(fd)
    except OSError as exc:
        raise BadInput(f"--liveness-fd {fd}: not an open pipe ({exc.strerror})") from None


def parse_weighted(text: str) -> dict[str, int]:
    """`a:3,b:1,c` -> the queues in order and their weights (1 where none is given)."""
    weights: dict[str, int] = {}
    for item in text.split(","):
        name, _, weight = item.strip().rpartition(":")
        if not name or not (weight.isascii() and weight.isdigit()):
            name, weight = item.strip(), "1"
        if not name:
            raise BadInput(f"--queues {text!r}: name the queues, e.g. --queues refunds:3,sms:1")
        weights[name] = int(weight)
    return weights


def _job_printer(verbose: bool, as_json: bool) -> OutcomeCallback | None:
    if as_json and not verbose:
        raise BadInput("--json shapes the lines of -v; add -v")
    if not verbose:
        return None
    return _print_outcome_json if as_json else lambda outcome: typer.echo(_outcome_line(outcome))


def _print_summary(report: RunReport, as_json: bool) -> None:
    if as_json:  # the counts of the plain summary, and how the run ended
        names = "ran succeeded failed retried deferred missed dropped recovered reindexed stuck"
        ended = ["stopped_early", "interrupted"]
        fields = {name: getattr(report, name) for name in [*names.split(), *ended]}
        times = {"busy": round(report.elapsed, 6), "wall": round(report.wall, 6)}
        print_json({**fields, **times, "record": "summary", "elapsed": times["busy"]})
        return
    jobs = "job" if report.ran == 1 else "jobs"
    deferred = f", {report.deferred} deferred" if report.deferred else ""
    typer.echo(
        f"ran {report.ran} {jobs}: {report.succeeded} succeeded, {report.failed} failed "
        f"({report.retried} retried){deferred}, {report.missed} missed, {report.dropped} dropped, "
        f"{report.recovered} recovered, {report.reindexed} re-indexed; "
        f"{report.wall:.2f}s wall, {report.elapsed:.2f}s busy"
    )


def _print_outcome_json(outcome: Outcome) -> None:
    """A job's line of `run -v --json`: the job keys of a --log-json record, plus what the
    handler said (`detail`) and how late the job started."""
    fields = job_fields(outcome)
    fields.update(record="job", detail=outcome.message, lateness=round(outcome.lateness, 6))
    print_json(fields)


def _outcome_line(outcome: Outcome) -> str:
    message = f" {outcome.summary}" if outcome.summary else ""
    retry = " (will retry)" if outcome.will_retry else ""
    return printable(
        f"{outcome.id} {outcome.call_name} attempt {outcome.attempt} "
        f"{outcome.word} {outcome.duration * 1000:.1f}ms{message}{retry}"
    )


def _rewriting(
    queue: Queue, options: RunOptions, outputs: Outputs
) -> AbstractContextManager[object]:
    """While a loop runs, its metrics file is rewritten every --metrics-interval."""
    if outputs.metrics_file is None or not options.loop:
        return nullcontext()
    from ..ops.textfile import Rewriter
    from ..store.table import close_connection

    # The thread's own database connection is closed when it ends.
    closing = partial(close_connection, queue.table)
    return Rewriter(outputs.metrics_file, outputs.metrics_interval, queue.metrics, closing)


@contextmanager
def _progress(
    queue: Queue, options: RunOptions, outputs: Outputs
) -> Iterator[OutcomeCallback | None]:
    """On a terminal, `run -v` over a backlog shows a progress bar under the job lines;
    never in cron, which has no terminal."""
    wanted = outputs.verbose and not (options.loop or outputs.as_json) and sys.stdout.isatty()
    due = queue.due_count(options.queues) if wanted else 0
    if due < PROGRESS_MIN_JOBS:
        yield None
        return
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TimeRemainingColumn

    columns = (BarColumn(), MofNCompleteColumn(), TimeRemainingColumn())
    with Progress(*columns, transient=True) as progress:
        task = progress.add_task("run", total=due)

        def advance(outcome: Outcome) -> None:
            progress.console.print(_outcome_line(outcome), markup=False, highlight=False)
            progress.advance(task)

        yield advance
