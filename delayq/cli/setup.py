"""Setting delayq up and checking it: init, doctor, reconcile, embedded-stop."""

from __future__ import annotations

from dataclasses import asdict
from enum import Enum
from typing import TYPE_CHECKING, Annotated

import typer

from ..config import load_settings
from ..errors import DelayqError
from .app import Command, JsonOption, app, check_database_exists, open_queue, print_json

if TYPE_CHECKING:
    from ..ops.doctor import Check


@app.command()
def init(
    schedule_lost: Annotated[
        bool,
        typer.Option(
            "--schedule-lost",
            help="Upgrade the seed's table although Redis holds none of its due times; "
            "its waiting jobs become missed.",
        ),
    ] = False,
) -> None:
    """Create the delay_queue table (or upgrade the one there) and the schedule index; safe
    to run again. Prints each change, or that all was in place."""
    queue = open_queue(create=True)
    changes = queue.init(schedule_lost=schedule_lost)
    for change in changes:
        typer.echo(change)
    typer.echo(f"{'initialised' if changes else 'all in place:'} {queue.describe()}")


@app.command()
def reconcile(as_json: JsonOption = False) -> None:
    """Compare the index with the table both ways and fix what differs; prints what it did."""
    result = open_queue().reconcile()
    names = sorted(set(result.reindexed) | set(result.removed))
    if as_json:
        counts = {"reindexed": result.reindexed, "removed": result.removed}
        queues = {name: {key: counts[key][name] for key in counts} for name in names}
        print_json({"queues": queues})
        return
    for name in names:
        typer.echo(f"{name}: re-indexed {result.reindexed[name]}, removed {result.removed[name]}")
    if not names:
        typer.echo("nothing to do")


@app.command("embedded-stop")
def embedded_stop() -> None:
    """Stop the embedded Redis server under DELAYQ_HOME (its data stays on disk)."""
    from ..store import embedded

    typer.echo("stopped" if embedded.stop(load_settings().home) else "not running")


@app.command()
def doctor(as_json: JsonOption = False) -> None:
    """Check settings, servers, table, handlers and Redis; one line each; exit 1 on a FAIL."""
    from ..ops.doctor import FAIL

    checks = _diagnose()
    if as_json:
        print_json({"checks": [asdict(check) for check in checks]})
    else:
        for check in checks:
            typer.echo(f"{check.level:<5} {check.name:<9} {check.detail}")
    if any(check.level == FAIL for check in checks):
        raise typer.Exit(1)


def _diagnose() -> list[Check]:
    """Every check, in order; stops early only when there is nothing left to check against."""
    from ..connection import connect
    from ..ops.doctor import (
        FAIL,
        Check,
        consistency_checks,
        database_checks,
        handler_checks,
        redis_checks,
        settings_check,
    )

    try:
        settings = load_settings()
    except DelayqError as exc:
        return [Check(FAIL, "config", str(exc))]
    checks = [settings_check(settings), *handler_checks(settings.handlers)]
    try:
        check_database_exists(settings)  # doctor only reads: it creates no database
        queue = connect(settings)
    except DelayqError as exc:
        return [*checks, Check(FAIL, "connect", str(exc))]
    with queue:
        checks += database_checks(queue.db, settings.database_url)
        checks += redis_checks(queue.index, queue.settings)
        if all(check.level != FAIL for check in checks):
            checks += consistency_checks(queue.table, queue.index)
        return checks


class Shell(str, Enum):  # noqa: UP042 - StrEnum is new in Python 3.11
    BASH = "bash"
    ZSH = "zsh"
    FISH = "fish"
    POWERSHELL = "powershell"


@app.command(cls=Command)
def completion(
    shell: Annotated[
        Shell, typer.Argument(metavar="SHELL", help="Your shell: bash, zsh, fish or powershell.")
    ],
) -> None:
    """Print the shell completion script, e.g. `delayq completion bash >
    ~/.local/share/bash-completion/completions/delayq` (--install-completion does it for
    the shell you are in)."""
    from typer._completion_shared import get_completion_script  # what --install-completion writes

    script = get_completion_script(
        prog_name="delayq", complete_var="_DELAYQ_COMPLETE", shell=shell.value
    )
    typer.echo(script)
