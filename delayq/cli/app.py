"""The `delayq` typer app and what its commands share: option types, the one mapping of
errors to exit codes, opening the Queue, printing JSON.

stdout carries results only (an id, a count, a JSON object); diagnostics go to stderr, and
`delayq run` prints nothing when all is well because cron mails whatever it prints.
"""

from __future__ import annotations

import json
import sys
import unicodedata
from collections.abc import Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING, Annotated, Any

import typer
import typer.core
from typer.core import TyperCommand, TyperGroup

from ..durations import parse_duration
from ..errors import BackendUnavailable, BadInput, ConfigError, DelayqError, JobNotFound

if TYPE_CHECKING:
    from ..queue import Queue


class OneLineUsageErrors:
    """A click command whose usage errors (an unknown option, an id that is not a number)
    are one `delayq: error:` line and exit 2, like delayq's own, instead of a framed
    usage box; cron mails it and scripts grep it the same way."""

    def main(self, *args: Any, standalone_mode: bool = True, **kwargs: Any) -> Any:
        if not standalone_mode:
            return super().main(*args, standalone_mode=False, **kwargs)  # type: ignore[misc]
        try:
            code = super().main(*args, standalone_mode=False, **kwargs)  # type: ignore[misc]
        except _HELP_INSTEAD as exc:  # `delayq` alone: the help, as ever
            exc.show()
            sys.exit(exc.exit_code)
        except _CLICK.exceptions.ClickException as exc:
            typer.echo(f"delayq: error: {printable(_usage_message(exc))}", err=True)
            sys.exit(exc.exit_code)
        except typer.Abort:
            typer.echo("Aborted!", err=True)
            sys.exit(1)
        sys.exit(code if isinstance(code, int) else 0)


# The click typer parses with: its own copy in newer typers, the click package in older.
_CLICK: Any = getattr(typer.core, "_click", None) or typer.core.click  # type: ignore[attr-defined]
# click 8.2 and later raise this for a group called without a command.
_HELP_INSTEAD = getattr(_CLICK.exceptions, "NoArgsIsHelpError", ())


def _usage_message(exc: Any) -> str:
    context = getattr(exc, "ctx", None)
    message = exc.format_message()
    return f"{message} (see {context.command_path} --help)" if context else message


class OneLineGroup(OneLineUsageErrors, TyperGroup):
    """The `delayq` app."""


class OneLineCommand(OneLineUsageErrors, TyperCommand):
    """A command built alone (`delayq run`, see cli/__init__.py)."""


app = typer.Typer(
    cls=OneLineGroup,
    add_completion=False,
    no_args_is_help=True,
    pretty_exceptions_enable=False,
    help="Durable delayed jobs on MySQL + Redis, driven by cron.",
)


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


# Characters a terminal acts on instead of showing: controls (ESC starts a sequence that
# can recolour, move the cursor or retitle the window; CR overwrites the line), format
# characters such as the bidi override U+202E that reorders what follows, line and
# paragraph separators, and lone surrogates.
_HIDDEN_CATEGORIES = frozenset({"Cc", "Cf", "Cs", "Zl", "Zp"})


def printable(value: object) -> str:
    """`value` as text a terminal shows rather than obeys: every control or format
    character written as its Python escape (\\x1b, \\r, \\u202e), on one line.

    Applied to everything a job's writer chose (class, method, ext, data, result, error)
    in the table and plain-text outputs, piped or not; --json output is escaped already.
    """
    text = "" if value is None else str(value)
    if text.isascii() and text.isprintable():
        return text
    return "".join(
        repr(char)[1:-1] if unicodedata.category(char) in _HIDDEN_CATEGORIES else char
        for char in text
    )


@contextmanager
def reporting_errors() -> Iterator[None]:
    """Turn a DelayqError into one line on stderr and its exit code; never a traceback."""
    try:
        yield
    except DelayqError as exc:
        typer.echo(f"delayq: error: {printable(exc)}", err=True)
        raise typer.Exit(exit_code(exc)) from None


def open_queue() -> Queue:
    from ..queue import connect  # imported here so `delayq --help` stays fast

    return connect()


def print_json(obj: Any) -> None:
    typer.echo(json.dumps(obj, sort_keys=True))


def duration_or_none(text: str | None, name: str) -> float | None:
    return parse_duration(text, name) if text is not None else None


def parse_json(text: str) -> Any:
    try:
        return json.loads(text)
    except RecursionError:
        raise BadInput("--data nests lists and objects too deeply; flatten it") from None
    except ValueError as exc:
        raise BadInput(f"--data is not valid JSON: {exc}") from None
