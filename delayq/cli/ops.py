"""The operator's looks and clean-ups: status, list, peek, purge, requeue, metrics. Each parses
options, makes one Queue call and prints: tables through rich on stdout, one JSON object with
--json, diagnostics on stderr."""

from __future__ import annotations

import sys
import time
from datetime import datetime
from typing import TYPE_CHECKING, Annotated, Any

import typer

from ..base.durations import format_delta, format_instant, parse_duration, shown
from ..errors import BadInput
from ..flow.limits import format_rate, parse_rate
from ..store.table import QueueFlow, Status
from .app import (
    Command,
    JsonOption,
    OptionalQueue,
    app,
    open_queue,
    print_json,
    printable,
)
from .flow import describe_limits, describe_pause

if TYPE_CHECKING:  # the modules behind the commands load when a command runs, keeping
    # `delayq run`, the command cron starts every minute, free of them
    from rich.console import Console
    from rich.table import Table

    from ..ops.overview import LastRun, QueueStats, StatusReport
    from ..ops.upcoming import Upcoming

DurationText = str  # what the user typed: seconds or 90s, 15m, 2h, 1d
DryRunOption = Annotated[bool, typer.Option("--dry-run", help="Count, change nothing.")]
ClassOption = Annotated[
    str | None, typer.Option("--class", help="Only jobs calling this exact class.")
]
# The QueueStats fields in status's first table, in its columns' order.
COUNTED = ("pending_due", "pending_later", "running", "success", "failed", "cancelled", "missed")


def _console() -> Console:
    from rich.console import Console

    # Off a terminal rich would wrap at 80 columns; a pipe or a log file gets whole lines.
    wide = None if sys.stdout.isatty() else 200
    # No markup or emoji codes: cells hold what job writers chose, and "[/x]" in an ext
    # is text to show, not a closing tag (which rich refuses with an exception).
    return Console(
        file=sys.stdout, width=wide, highlight=False, soft_wrap=False, markup=False, emoji=False
    )


def _table(headers: str, right: str = "", wrap: str = "") -> Table:
    """A borderless table with these space-separated headers (`|` stands for a space), those
    in `right` right-aligned; on a narrow terminal only those in `wrap` give up width."""
    from rich import box
    from rich.table import Table

    # The rule under the header only on a terminal: cron mail and `| grep` get plain text.
    rule = box.SIMPLE_HEAD if sys.stdout.isatty() else None
    table = Table(box=rule, show_edge=False, pad_edge=False)
    for header in headers.split():
        table.add_column(
            header.replace("|", " "),
            justify="right" if header in right.split() else "left",
            no_wrap=header not in wrap.split(),
        )
    return table


def _parse_statuses(text: str, allowed: tuple[Status, ...]) -> tuple[Status, ...]:
    """`failed,missed` → (Status.FAILED, Status.MISSED), refusing words outside `allowed`
    and empty ones: `--status ''` from an unset shell variable must not mean every status."""
    words = [part.strip() for part in text.split(",")]
    if not all(words):
        raise BadInput(f"--status {shown(text)} names an empty status; give e.g. failed,missed")
    by_name = {status.name: status for status in allowed}  # as Status.from_word reads them
    for word in words:
        if word.upper() not in by_name:
            known = ", ".join(item.word for item in allowed)
            raise BadInput(f"--status {word!r} is not allowed here; use one or more of {known}")
    return tuple(by_name[word.upper()] for word in words)


def _relative(seconds: float) -> str:
    """`in 3m` for the future, `12s ago` for the past."""
    return f"in {format_delta(seconds)}" if seconds > 0 else f"{format_delta(-seconds)} ago"


@app.command()
def status(
    as_json: JsonOption = False,
    check: Annotated[
        bool, typer.Option("--check", help="Exit 1 and say why when a run is overdue or late.")
    ] = False,
    max_idle: Annotated[
        DurationText, typer.Option("--max-idle", help="With --check: longest time without a run.")
    ] = "5m",
    max_lag: Annotated[
        DurationText, typer.Option("--max-lag", help="With --check: latest a due job may be.")
    ] = "10m",
) -> None:
    """Per queue: pending (due now / later), running, finished counts, backlog and next due."""
    idle, lag = parse_duration(max_idle, "--max-idle"), parse_duration(max_lag, "--max-lag")
    report = open_queue().status()
    if as_json:
        print_json(report.as_json())
    elif not check:
        _print_status(report)
    problems = report.problems(idle, lag) if check else []
    for line in problems:
        typer.echo(f"delayq: check: {printable(line)}", err=True)
    if problems:
        raise typer.Exit(1)


def _print_status(report: StatusReport) -> None:
    console = _console()
    console.print(f"last run: {_describe_last_run(report.last_run, report.now)}")
    if not report.queues:
        console.print("no jobs")
        return
    # Two narrow tables rather than one wide one: each fits an 80-column terminal.
    counts = "due later running success failed cancelled missed"
    jobs = _table(f"queue {counts}", right=counts)
    failures = "failed|1h terminal retried"
    timing = _table(f"queue oldest|due late next|due {failures}", right=f"late next|due {failures}")
    for name, stats in report.queues.items():
        shown_name = printable(name) + (" (paused)" if stats.paused else "")
        shown_name += f" ({stats.rate})" if stats.rate else ""
        shown_name += f" ({stats.concurrency} at once)" if stats.concurrency else ""
        jobs.add_row(shown_name, *(_count_cell(stats, field) for field in COUNTED))
        timing.add_row(shown_name, *_timing_cells(stats, report.now))
    console.print(jobs, "", timing)  # a blank line between the two
    for name, stats in report.queues.items():
        if stats.paused:
            due = _count_cell(stats, "pending_due")
            console.print(f"{printable(name)}: {describe_pause(name, stats.paused_at, due)}")
        if stats.rate or stats.concurrency:
            count, period = parse_rate(stats.rate) if stats.rate else (None, None)
            limits = QueueFlow(rate_count=count, rate_period=period, concurrency=stats.concurrency)
            console.print(f"{printable(name)}: {describe_limits(name, limits)}")


def _timing_cells(stats: QueueStats, now: float) -> list[str]:
    oldest, late = "-", "-"
    if stats.oldest_due_lag is not None:
        oldest = f"#{stats.oldest_due_id} {_clock(stats.oldest_due_at)}"
        late = format_delta(stats.oldest_due_lag)
    upcoming = "-" if stats.next_due_at is None else _relative(stats.next_due_at - now)
    failures = [str(stats.failed_last_hour)]
    failures += [_count_cell(stats, field) for field in ("failed_terminal", "failed_retried")]
    return [oldest, late, upcoming, *failures]


def _count_cell(stats: QueueStats, field: str) -> str:
    """A count as the table shows it: "~" before an estimate, "-" for one not made."""
    value = getattr(stats, field)
    if value is None:
        return "-"
    return f"~{value}" if field in stats.estimated_fields else str(value)


def _clock(epoch: float | None) -> str:
    """Local time to the second, short enough for a table cell."""
    if epoch is None:
        return "-"
    try:
        return datetime.fromtimestamp(epoch).strftime("%Y-%m-%d %H:%M:%S")
    except (ValueError, OverflowError, OSError):  # a time no calendar here can show
        return f"{epoch:g}"


def _describe_last_run(last: LastRun | None, now: float) -> str:
    if last is None or last.started_at is None:
        return "never"
    started = f"{format_instant(last.started_at)} ({_relative(last.started_at - now)})"
    if last.loop:  # one run: when it started, when it last beat, its jobs since it started
        beat = min(0.0, (last.finished_at or now) - now)  # hosts' clocks may disagree a little
        parts = [f"a loop started {started}", f"last beat {_relative(beat)}"]
    else:
        parts = [started] + ([] if last.duration is None else [f"took {last.duration:.2f}s"])
    if last.outcome:
        parts.append(last.outcome)
    if last.jobs is not None:
        since = " since it started" if last.loop else ""
        parts.append(f"{last.jobs} job" + ("" if last.jobs == 1 else "s") + since)
    return ", ".join(parts)


@app.command("list")
def list_jobs(
    status_words: Annotated[
        str | None, typer.Option("--status", help="Only these statuses, e.g. failed,missed.")
    ] = None,
    queue_name: OptionalQueue = None,
    ext: Annotated[str | None, typer.Option("--ext", help="Only this business key.")] = None,
    class_path: ClassOption = None,
    since: Annotated[
        DurationText | None, typer.Option("--since", help="Only rows changed this recently.")
    ] = None,
    limit: Annotated[int, typer.Option("--limit", help="At most N rows.")] = 50,
    before_id: Annotated[
        int | None, typer.Option("--before-id", help="Next page: ids below this one.")
    ] = None,
    as_json: JsonOption = False,
) -> None:
    """Jobs newest first, filtered; page on with --before-id."""
    from ..ops.overview import JobFilter

    filters = JobFilter(
        statuses=() if status_words is None else _parse_statuses(status_words, tuple(Status)),
        queue=queue_name,
        ext=ext,
        class_path=class_path,
        since=since,  # JobFilter reads and checks it as --since
    )
    rows = open_queue().list_jobs(filters, limit=limit, before_id=before_id)
    next_before = rows[-1]["id"] if len(rows) == limit else None
    if as_json:
        print_json({"jobs": rows, "next_before_id": next_before})
        return
    table = _table("id status queue call ext try run_at message", "id try", wrap="call ext message")
    for row in rows:
        cells = [row["id"], row["status"], row["queue"], _call(row), row["ext"], row["retry_times"]]
        table.add_row(*map(printable, cells), _clock(row["run_at"]), _shorten(row["message"], 60))
    _console().print(table if rows else "no jobs")
    if next_before is not None:
        typer.echo(f"more: add --before-id {next_before}", err=True)


def _call(view: dict[str, Any]) -> str:
    """What a row calls, and how it recurs (by cron or `every 1h`); UNREADABLE when its params
    name no class and method."""
    from ..store.index import UNREADABLE

    names = (view["class"], view["method"])
    call = ".".join(names) if all(isinstance(name, str) for name in names) else UNREADABLE
    return f"{call} ({view['schedule']})" if view.get("schedule") else call


def _shorten(text: str | None, width: int) -> str:
    line = printable(" ".join((text or "").split()))
    return line if len(line) <= width else line[: width - 1] + "…"


@app.command(cls=Command)
def peek(
    count: Annotated[int, typer.Argument(metavar="N", help="How many jobs.")] = 10,
    queue_name: OptionalQueue = None,
    as_json: JsonOption = False,
) -> None:
    """The next N jobs in schedule order, with the time until each is due; claims nothing."""
    queue = open_queue()
    upcoming = queue.peek(count, queues=None if queue_name is None else [queue_name])
    now, paused, limited = time.time(), queue.paused(), queue.limited()
    rates = {name: format_rate(flow.rate) for name, flow in limited.items() if flow.rate}
    views = [
        dict(
            _upcoming_view(entry, now),
            paused=entry.queue in paused,
            rate=rates.get(entry.queue),
            concurrency=getattr(limited.get(entry.queue), "concurrency", None),
        )
        for entry in upcoming
    ]
    if as_json:
        print_json({"now": now, "jobs": views})
        return
    table = _table("id queue due call ext status", right="id", wrap="call ext")
    for view in views:
        call = printable(_call(view)) if view["status"] else "(no row)"
        cells = [str(view["id"]), printable(view["queue"]), _relative(view["due_in"]), call]
        state = view["status"] or "-"
        if not view["indexed"]:  # added with using=: the next run's sweep schedules it
            state += " (not yet indexed)"
        if view["paused"]:
            state += " (queue paused)"
        if view["rate"]:
            state += f" (queue limited to {view['rate']})"
        if view["concurrency"]:
            state += f" (queue limited to {view['concurrency']} at once)"
        table.add_row(*cells, printable(view["ext"]), state)
    _console().print(table if views else "nothing scheduled")


def _upcoming_view(entry: Upcoming, now: float) -> dict[str, Any]:
    from ..jobs.spec import job_view

    row = job_view(entry.row) if entry.row else {}
    return {
        "id": entry.id,
        "queue": entry.queue,
        "run_at": entry.run_at,
        "due_in": entry.run_at - now,
        "indexed": entry.indexed,
        **{key: row.get(key) for key in ("class", "method", "ext", "status", "schedule")},
    }


@app.command()
def purge(
    older_than: Annotated[
        DurationText, typer.Option("--older-than", help="Rows last changed longer ago, e.g. 30d.")
    ],
    status_words: Annotated[
        str, typer.Option("--status", help="Which finished statuses, comma-separated.")
    ] = "success,failed,cancelled,missed",
    dry_run: DryRunOption = False,
    everything: Annotated[
        bool, typer.Option("--all", help="Allow --older-than 0: every finished row.")
    ] = False,
) -> None:
    """Delete old finished rows in short batches; prints how many (would be) deleted, and
    on a terminal how fast it goes."""
    from ..ops.maintenance import PURGEABLE
    from .progress import counting

    age = parse_duration(older_than, "--older-than")
    if age == 0 and not (everything or dry_run):
        raise BadInput("--older-than 0 deletes every finished row; to mean it, add --all")
    statuses = _parse_statuses(status_words, PURGEABLE)
    what = "rows that would be deleted" if dry_run else "rows deleted"
    with counting() as tally:
        count = open_queue().purge(
            age, statuses, dry_run=dry_run, counted=lambda rows: tally(what, rows, None)
        )
    typer.echo(count)


@app.command()
def requeue(
    status_words: Annotated[
        str, typer.Option("--status", help="Finished statuses to retry, e.g. failed,missed.")
    ],
    class_path: ClassOption = None,
    queue_name: OptionalQueue = None,
    since: Annotated[
        DurationText | None, typer.Option("--since", help="Only rows that finished this recently.")
    ] = None,
    dry_run: DryRunOption = False,
    everything: Annotated[
        bool, typer.Option("--all", help="Without --class, --queue or --since: every such chain.")
    ] = False,
) -> None:
    """Retry the latest attempt of every matching chain; prints how many (would be) requeued."""
    from ..ops.maintenance import PURGEABLE
    from ..ops.overview import JobFilter

    narrowed = any(value is not None for value in (class_path, queue_name, since))
    if not (narrowed or everything or dry_run):
        raise BadInput(
            "requeue without --class, --queue or --since runs again every chain with "
            "that status; narrow it, or add --all"
        )
    filters = JobFilter(
        statuses=_parse_statuses(status_words, PURGEABLE),
        queue=queue_name,
        class_path=class_path,
        since=since,  # JobFilter reads and checks it as --since
    )
    result = open_queue().requeue(filters, dry_run=dry_run)
    for job_id, reason in result.skipped:
        typer.echo(f"delayq: skipped job {job_id}: {printable(reason)}", err=True)
    typer.echo(len(result.ids))


@app.command()
def metrics(
    file: Annotated[
        str | None, typer.Option("--file", help="Replace this file instead of printing.")
    ] = None,
) -> None:
    """Print the Prometheus exposition (counters summed over every run, queue gauges)."""
    if file is not None:
        from ..ops.textfile import check_writable, write_file

        check_writable(file)
        write_file(file, open_queue().metrics())
        return
    sys.stdout.buffer.write(open_queue().metrics())
