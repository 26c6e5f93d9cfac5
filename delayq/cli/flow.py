"""Flow control: `delayq pause`, `delayq resume` and `delayq limit`, and how a paused or
limited queue reads in the operator's looks (status, peek), so that someone who never
read the docs sees what holds it."""

from __future__ import annotations

import time
from typing import Annotated

import typer

from ..base.durations import format_delta, format_instant
from ..errors import BadInput
from ..flow.limits import format_rate, parse_concurrency_limit, parse_rate
from ..store.table import QueueFlow
from .app import Command, app, open_queue, printable

NamesArgument = Annotated[list[str], typer.Argument(metavar="NAME...", help="Queue names.")]


@app.command(cls=Command)
def pause(
    names: NamesArgument,
    new: Annotated[
        bool, typer.Option("--new", help="Pause a queue that has no jobs yet (not a typo).")
    ] = False,
) -> None:
    """Stop every runner, on every host, from starting the jobs of these queues; running jobs
    finish, adds and cancels go on, due jobs wait (never missed) until `delayq resume`."""
    queue = open_queue()
    if not new:
        _refuse_unknown(queue.unknown(names), "pause", _NEW_HINT)
    before = queue.paused()
    for name, flow in queue.pause(*names).items():
        again = "already " if name in before else ""
        due = str(queue.due_count([name]))
        typer.echo(f"{printable(name)}: {again}{describe_pause(name, flow.paused_at, due)}")


@app.command(cls=Command)
def resume(names: NamesArgument) -> None:
    """Let runners start the jobs of these paused queues again; a job that fell due while its
    queue was paused is late only counting from now."""
    queue = open_queue()
    _refuse_unknown(queue.unknown(names), "resume", "")
    before = queue.paused()
    queue.resume(*names)
    for name in dict.fromkeys(names):
        if name in before:
            due = queue.due_count([name])
            typer.echo(f"{printable(name)}: resumed; {_jobs(due)} due start now")
        else:
            typer.echo(f"{printable(name)}: was not paused")


@app.command(cls=Command)
def limit(
    names: NamesArgument,
    rate: Annotated[
        str | None,
        typer.Option(
            "--rate", metavar="N/UNIT", help="At most N job starts per s, m or h: 10/s, 600/m."
        ),
    ] = None,
    concurrency: Annotated[
        str | None,
        typer.Option("--concurrency", metavar="N", help="At most N of their jobs running at once."),
    ] = None,
    clear: Annotated[bool, typer.Option("--clear", help="Lift the queues' limits.")] = False,
    new: Annotated[
        bool, typer.Option("--new", help="Limit a queue that has no jobs yet (not a typo).")
    ] = False,
) -> None:
    """Let every runner, on every host together, start at most N jobs of these queues in any
    window of the period (--rate), or run at most N of them at once (--concurrency); a job
    held back stays pending, in its place, and starts as soon as the limits allow (it is not
    a failure and uses no retry). A limit not given stays as it is."""
    if clear == (rate is not None or concurrency is not None):
        raise BadInput(
            "give --rate N/UNIT (like --rate 10/s), --concurrency N (like --concurrency 4), "
            "or --clear"
        )
    if rate is not None:
        parse_rate(rate)  # refused before any server is asked
    concurrency_limit = None if concurrency is None else parse_concurrency_limit(concurrency)
    queue = open_queue()
    if not new:
        _refuse_unknown(queue.unknown(names), "limit", _NEW_HINT.replace("pause", "limit"))
    if clear:
        settings = queue.limit(*names, rate=None, concurrency=None)
    elif rate is None:
        settings = queue.limit(*names, concurrency=concurrency_limit)
    elif concurrency_limit is None:
        settings = queue.limit(*names, rate=rate)
    else:
        settings = queue.limit(*names, rate=rate, concurrency=concurrency_limit)
    for name, flow in settings.items():
        typer.echo(f"{printable(name)}: {describe_limits(name, flow)}")


def describe_limits(name: str, flow: QueueFlow) -> str:
    """A queue's limits in words, with the way to lift them."""
    if not flow.limited:
        return "no limits; runners start its due jobs as fast as they can"
    parts = []
    if flow.rate is not None:
        count, period = flow.rate
        per = {1.0: "second", 60.0: "minute", 3600.0: "hour"}.get(period, f"{period:g}s")
        starts = "1 job start" if count == 1 else f"{count} job starts"
        parts.append(f"at most {starts} a {per} ({format_rate(flow.rate)})")
    if flow.concurrency is not None:
        running = "1 job" if flow.concurrency == 1 else f"{flow.concurrency} jobs"
        parts.append(f"at most {running} running at once")
    return (
        f"{' and '.join(parts)} across all runners; due jobs beyond that wait in order "
        f"(`delayq limit {printable(name)} --clear` lifts {'them' if len(parts) > 1 else 'it'})"
    )


_NEW_HINT = "; check the name, or give --new to pause it before its first job"


def _refuse_unknown(unknown: list[str], verb: str, hint: str) -> None:
    if unknown:
        names = ", ".join(repr(printable(name)) for name in unknown)
        raise BadInput(f"cannot {verb} {names}: no job has used that queue{hint}")


def describe_pause(name: str, paused_at: float | None, due: str, now: float | None = None) -> str:
    """A paused queue in words: since when, how long, and what waits, with the way out."""
    if paused_at is None:
        return "running"
    ago = format_delta(max(0.0, (time.time() if now is None else now) - paused_at))
    return (
        f"paused since {format_instant(paused_at)} ({ago} ago); {_jobs(due)} due "
        f"{'waits' if due == '1' else 'wait'} until `delayq resume {printable(name)}`"
    )


def _jobs(count: int | str) -> str:
    return "1 job" if str(count) == "1" else f"{count} jobs"
