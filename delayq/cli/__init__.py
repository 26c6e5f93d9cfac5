"""The `delayq` command: one typer function per command, grouped by audience — jobs.py for
application code and scripts, running.py for `delayq run`, ops.py for the operator's looks
and clean-ups, setup.py for init and doctor. Only cli/ prints or chooses an exit code.
"""

from __future__ import annotations

import sys
from pathlib import Path

import typer

from ..ops.logs import setup_logging
from . import jobs, ops, running, setup  # noqa: F401 - importing them registers their commands on `app`
from .app import OneLineCommand, app
from .running import run


def main() -> None:
    """Console-script entry point."""
    setup_logging()
    if sys.argv[1:2] == ["run"]:
        # Cron starts `delayq run` every minute (loop.sh every few seconds): build only that
        # command instead of the whole app, whose sixteen commands typer would inspect first.
        single = typer.Typer(add_completion=False, pretty_exceptions_enable=False)
        single.command(cls=OneLineCommand)(run)
        single(args=sys.argv[2:], prog_name=f"{_program_name()} run")
        return
    app()


def _program_name() -> str:
    name = Path(sys.argv[0]).name
    return "delayq" if name in ("__main__.py", "-c") else name
