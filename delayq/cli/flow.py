"""Flow control: `delayq pause` and `delayq resume`, and how a paused queue reads in the
operator's looks (status, peek), so that someone who never read the docs sees what holds it."""

from __future__ import annotations

import time
from typing import Annotated

import typer

from ..durations import format_delta, format_instant
from ..errors import BadInput
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
