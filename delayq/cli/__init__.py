"""The `delayq` command: one typer function per command, grouped by audience — jobs.py for
application code and scripts, running.py for `delayq run`, ops.py for the operator's looks
and clean-ups, flow.py for pause, resume and limit, setup.py for init and doctor. Only cli/ prints
or chooses an exit code.
"""

from __future__ import annotations

import gc
import os
import sys
from pathlib import Path

import typer

from ..config import load_settings
from ..errors import DelayqError
from ..ops.logs import setup_logging
from . import flow, jobs, listen, ops, running, setup, web  # noqa: F401 - importing them registers their commands on `app`
from .app import TYPER_SETTINGS, Command, app


def main() -> None:
    """Console-script entry point."""
    # The interpreter's collections as it exits walk every object still tracked, and the
    # imports alone leave tens of thousands: 30 ms of every `delayq` command, most of a `delayq
    # run` with nothing due. Frozen before any command runs, they are left out of every
    # collection; what the command and its handlers make later is collected as before.
    gc.freeze()
    setup_logging()
    put_application_on_path()
    if sys.argv[1:2] == ["run"]:
        # Cron starts `delayq run` every minute (loop.sh every few seconds): build only that
        # command instead of the whole app, whose sixteen commands typer would inspect first.
        single = typer.Typer(add_completion=False, **TYPER_SETTINGS)
        single.command(cls=Command)(running.run)
        single(args=sys.argv[2:], prog_name=f"{_program_name()} run")
        return
    app(prog_name=_program_name())


def _program_name() -> str:
    name = Path(sys.argv[0]).name
    return "delayq" if name in ("__main__.py", "-c") else name


def put_application_on_path() -> None:
    """Let jobs name modules in the directory `delayq` runs in (`tasks.Mailer`) and in those
    DELAYQ_PATH lists (`src`, say). Appended, not put first as `python -m` does: a stray
    `redis.py` in the directory cron starts from must not replace a package delayq imports."""
    try:
        configured = [str(directory.resolve()) for directory in load_settings().path]
    except DelayqError:
        configured = []  # the command reports a bad setting itself, as one line and exit 2
    for directory in [*configured, os.getcwd()]:
        if directory not in sys.path:
            sys.path.append(directory)
