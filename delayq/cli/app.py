"""The `delayq` typer app and what its commands share: option types, exit codes, opening the
Queue, printing JSON. stdout carries results only (an id, a count, a JSON object), the rest
goes to stderr; `delayq run` prints nothing when all is well because cron mails it all."""

from __future__ import annotations

import json
import sys
from typing import TYPE_CHECKING, Annotated, Any

import typer
import typer.core
from typer.core import TyperArgument, TyperCommand, TyperGroup

from ..errors import BackendUnavailable, BadInput, ConfigError, DelayqError
from ..ops.printing import printable

if TYPE_CHECKING:
    from ..config import Settings
    from ..queue import Queue


class OneLineUsageErrors:
    """A click command whose usage errors (an unknown option, an id that is not a number)
    are one `delayq: error:` line and exit 2, like delayq's own (`invoke`), instead of a
    framed usage box; cron mails it and scripts grep it the same way."""

    def main(self, *args: Any, standalone_mode: bool = True, **kwargs: Any) -> Any:
        if not standalone_mode:
            return super().main(*args, standalone_mode=False, **kwargs)  # type: ignore[misc]
        try:
            code = super().main(*args, standalone_mode=False, **kwargs)  # type: ignore[misc]
        except _HELP_INSTEAD as exc:  # `delayq` alone: the help, as ever
            exc.show()
            sys.exit(exc.exit_code)
        except _CLICK.exceptions.ClickException as exc:
            context, program = getattr(exc, "ctx", None), kwargs.get("prog_name")
            path = context.command_path if context else getattr(exc, "command_path", program)
            message = exc.format_message() + (f" (see {path} --help)" if path else "")
            typer.echo(f"delayq: error: {printable(message)}", err=True)
            sys.exit(exc.exit_code)
        except typer.Abort:
            typer.echo("Aborted!", err=True)
            sys.exit(1)
        sys.exit(code if isinstance(code, int) else 0)

    def invoke(self, ctx: Any) -> Any:
        """Run the command: a DelayqError it raises is one line on stderr and exit 2 for bad
        input or settings, else 1 (an unknown id, an unreachable backend); never a traceback."""
        try:
            return super().invoke(ctx)  # type: ignore[misc]
        except DelayqError as exc:
            typer.echo(f"delayq: error: {printable(exc)}", err=True)
            raise typer.Exit(2 if isinstance(exc, (BadInput, ConfigError)) else 1) from None
        except _CLICK.exceptions.UsageError as exc:
            # click's parser raises some errors ("requires an argument") without the
            # command's context; in a group, the command being parsed is the one it picked.
            if exc.ctx is None and ctx.invoked_subcommand:
                exc.command_path = f"{ctx.command_path} {ctx.invoked_subcommand}"
            raise


# The click typer parses with: its own copy in newer typers, the click package in older.
_CLICK: Any = getattr(typer.core, "_click", None) or typer.core.click  # type: ignore[attr-defined]
# click 8.2 and later raise this for a group called without a command.
_HELP_INSTEAD = getattr(_CLICK.exceptions, "NoArgsIsHelpError", ())


class OneLineGroup(OneLineUsageErrors, TyperGroup):
    """The `delayq` app."""


class Command(OneLineUsageErrors, TyperCommand):
    """A delayq command (its one-line usage errors matter when it is built alone, as `delayq
    run` is, see cli/__init__.py) whose usage line names arguments in capitals as its errors
    do (each gives that as its metavar), an optional one in brackets: `delayq cancel [OPTIONS]
    [ID]`; typer's own would mix `{CLASS}`, `{method}` and `{shell}:<bash|...>`."""

    def collect_usage_pieces(self, ctx: Any) -> list[str]:
        pieces = [self.options_metavar] if self.options_metavar else []
        for param in self.get_params(ctx):
            if isinstance(param, TyperArgument):
                name = param.metavar or (param.name or "").upper()
                pieces.append(name if param.required else f"[{name}]")
        return pieces


# What the app and `delayq run` built alone (cli/__init__.py) share.
TYPER_SETTINGS: dict[str, Any] = {
    "pretty_exceptions_enable": False,
    "context_settings": {"help_option_names": ["-h", "--help"]},
    # Help in rich's boxes on a terminal only: in a pager, a file or cron mail they are
    # noise. Both streams count, since `delayq` alone prints its help to stderr.
    "rich_markup_mode": "rich" if sys.stdout.isatty() and sys.stderr.isatty() else None,
}
app = typer.Typer(
    cls=OneLineGroup,
    no_args_is_help=True,
    help="Durable delayed jobs on MySQL + Redis, driven by cron.",
    **TYPER_SETTINGS,
)


def _print_version(asked: bool) -> None:
    if asked:
        from importlib.metadata import PackageNotFoundError, version

        try:
            typer.echo(f"delayq {version('delayq')}")
        except PackageNotFoundError:
            typer.echo("delayq: error: delayq is not installed, so it has no version", err=True)
            raise typer.Exit(1) from None
        raise typer.Exit()


@app.callback()
def _options(
    show_version: Annotated[
        bool,
        typer.Option(
            "--version", is_eager=True, callback=_print_version, help="Print the version and exit."
        ),
    ] = False,
) -> None:
    """Options of `delayq` itself, given before the command."""


QueueOption = Annotated[str, typer.Option("--queue", "-q", help="Queue name.")]
OptionalQueue = Annotated[str | None, typer.Option("--queue", "-q", help="Only this queue.")]
JsonOption = Annotated[bool, typer.Option("--json", help="Print one JSON object.")]


def open_queue(*, create: bool = False, **overrides: Any) -> Queue:
    """The configured Queue. Where its SQLite file (the embedded default's, or one a URL
    names) does not exist, only if `create` (init, run, web): a command that reads or changes
    jobs must not leave an empty database file, or `.delayq` and a background redis-server,
    behind in a directory that never had jobs."""
    from ..config import load_settings
    from ..connection import connect  # imported here so `delayq --help` stays fast

    settings = load_settings().with_overrides(**overrides)
    if not create:
        check_database_exists(settings)
    return connect(settings)


def check_database_exists(settings: Settings) -> None:
    """BackendUnavailable, saying where it looked, when the SQLite file is not there; a
    malformed Redis URL is reported first, as the usage error it is."""
    from ..store.embedded import database_path
    from ..store.table import sqlite_file

    if not settings.database_url:
        home = settings.home.resolve()
        if not database_path(home).exists():
            _check_redis_url(settings.redis_url)
            raise BackendUnavailable(
                f"no delayq database in {home}: run the command where `delayq init` ran (your "
                "application's directory), or set DELAYQ_HOME or DELAYQ_DATABASE_URL"
            )
    elif (path := sqlite_file(settings.database_url)) and not path.exists():
        _check_redis_url(settings.redis_url)
        raise BackendUnavailable(
            f"no delayq database at {path}: run `delayq init` to create it, or correct "
            "DELAYQ_DATABASE_URL (sqlite:////absolute/path.db)"
        )


def _check_redis_url(url: str | None) -> None:
    """The error connect() would give for this Redis URL, if any: ConfigError for a malformed
    one, BackendUnavailable for a Cluster whose nodes do not answer (its client asks them for
    their hash slots at once; any other connects lazily, so nothing is reached)."""
    import redis

    from ..store.backend_errors import one_line
    from ..store.urls import open_redis

    if not url:
        return
    try:
        open_redis(url).close()
    except redis.RedisError as exc:
        raise BackendUnavailable(f"Redis error: {one_line(exc, url)}") from exc


def print_json(obj: Any) -> None:
    typer.echo(json.dumps(obj, sort_keys=True))
