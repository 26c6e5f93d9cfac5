"""Setting delayq up and checking it: init, doctor, reconcile, embedded-stop."""

from __future__ import annotations

from dataclasses import asdict
from enum import Enum
from typing import TYPE_CHECKING, Annotated

import typer

from ..config import load_settings
from ..errors import DelayqError
from ..store.table import is_notice
from .app import Command, JsonOption, app, check_database_exists, open_queue, print_json

if TYPE_CHECKING:
    from ..ops.doctor import Check
    from ..ops.sampling import Scope


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
    lines = queue.init(schedule_lost=schedule_lost)
    for line in lines:
        typer.echo(line)
    # What the server refused is said at every init; it is no change.
    changed = any(not is_notice(line) for line in lines)
    typer.echo(f"{'initialised' if changed else 'all in place:'} {queue.describe()}")


@app.command()
def reconcile(as_json: JsonOption = False) -> None:
    """Compare the index with the table both ways, up to each queue's horizon, and fix what
    differs; prints what it did. On a terminal, a line under it counts the pending rows
    compared."""
    from .progress import counting

    with counting() as tally:
        compared = [0]

        def on_rows(rows: int) -> None:
            tally("pending rows compared", rows - compared[0], None)
            compared[0] = rows

        result = open_queue().reconcile(on_rows)
    names = sorted(set(result.reindexed) | set(result.removed))
    if as_json:
        counts = {"reindexed": result.reindexed, "removed": result.removed}
        queues = {name: {key: counts[key][name] for key in counts} for name in names}
        print_json(
            {"queues": queues, "counts_corrected": result.counts_corrected, "rows": result.rows}
        )
        return
    for name in names:
        typer.echo(f"{name}: re-indexed {result.reindexed[name]}, removed {result.removed[name]}")
    if result.counts_corrected:
        corrected = sorted(result.counts_corrected.items())
        typer.echo("corrected pending counts: " + ", ".join(f"{n} {e:+d}" for n, e in corrected))
    if not names and not result.counts_corrected:
        typer.echo("nothing to do")


@app.command("embedded-stop")
def embedded_stop() -> None:
    """Stop the embedded Redis server under DELAYQ_HOME (its data stays on disk)."""
    from ..store import embedded

    typer.echo("stopped" if embedded.stop(load_settings().home) else "not running")


@app.command()
def doctor(
    as_json: JsonOption = False,
    full: Annotated[
        bool,
        typer.Option(
            "--full",
            help="Read every schedule member and every overdue pending row, not a sample; "
            "takes time in proportion (progress on a terminal).",
        ),
    ] = False,
) -> None:
    """Check settings, servers, table, handlers and Redis; one line each; exit 1 on a FAIL."""
    from ..ops.doctor import FAIL
    from ..ops.sampling import Scope
    from .progress import counting

    with counting() as tally:
        checks = _diagnose(Scope(full, tally) if full else Scope())
    if as_json:
        print_json({"checks": [asdict(check) for check in checks]})
    else:
        for check in checks:
            typer.echo(f"{check.level:<5} {check.name:<9} {check.detail}")
    if any(check.level == FAIL for check in checks):
        raise typer.Exit(1)


def _diagnose(scope: Scope) -> list[Check]:
    """Every check, in order; one that cannot be made is a `skip` line saying why."""
    from ..connection import connect
    from ..ops.doctor import (
        CONSISTENCY_CHECKS,
        DATABASE_CHECKS,
        FAIL,
        REDIS_CHECKS,
        Check,
        consistency_checks,
        database_checks,
        handler_checks,
        redis_checks,
        settings_check,
        skipped,
    )

    after_connect = DATABASE_CHECKS + REDIS_CHECKS + CONSISTENCY_CHECKS
    try:
        settings = load_settings()
    except DelayqError as exc:
        rest = skipped(("handlers", *after_connect), "the settings are wrong")
        return [Check(FAIL, "config", str(exc)), *rest]
    checks = [settings_check(settings), *handler_checks(settings.handlers)]
    try:
        check_database_exists(settings)  # doctor only reads: it creates no database
        queue = connect(settings)
    except DelayqError as exc:
        rest = skipped(after_connect, "delayq could not connect")
        return [*checks, Check(FAIL, "connect", str(exc)), *rest]
    with queue:
        servers = database_checks(queue.table, settings.database_url)
        servers += redis_checks(queue.index, queue.settings, scope)
        consistency = consistency_checks(queue.table, queue.index, servers, scope)
        return [*checks, *servers, *consistency]


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
