"""Where delayq's log records go and in what shape: text or one JSON object per line, on
stderr or appended to a file. cli/ calls setup_logging; library modules only log through
logging.getLogger(__name__) and never choose a destination."""

from __future__ import annotations

import json
import logging
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any, TextIO

from ..base.durations import format_instant
from ..errors import BadInput, ConfigError

if TYPE_CHECKING:
    from ..store.table import Outcome

# `logger`: the record's logger name, as --log-json gives it, but `delayq` for every module of
# delayq's own: what its lines have always said, where the module adds nothing an operator uses.
TEXT_FORMAT = "%(asctime)s %(logger)s %(levelname)s %(message)s"
LEVELS = ("debug", "info", "warning", "error", "critical")
_installed: list[logging.Handler] = []


def setup_logging(
    level: str = "warning", path: str | Path | None = None, json_lines: bool = False
) -> None:
    """Send records at `level` or above to `path` (default stderr), as text or JSON lines,
    in place of what an earlier call installed; other handlers are left alone."""
    if level.lower() not in LEVELS:
        raise BadInput(f"--log-level {level!r} is not one of {', '.join(LEVELS)}")
    handler: logging.Handler
    if path is None:
        handler = CurrentStderrHandler()
        if logging.getLevelName(level.upper()) > logging.INFO:
            # cron mails whatever reaches stderr: only the run's own errors, not its jobs'.
            handler.addFilter(lambda record: getattr(record, "job_outcome", None) is None)
    else:
        try:
            # Watched: after logrotate moves the file, the next record opens a new one.
            from logging.handlers import WatchedFileHandler  # only for --log-file; loads pickle

            handler = WatchedFileHandler(path, encoding="utf-8")
        except OSError as exc:
            raise ConfigError(
                f"--log-file {str(path)!r} cannot be opened: {exc.strerror}"
            ) from None
        except ValueError:  # a NUL in the path
            raise ConfigError(f"--log-file {str(path)!r} is not a path") from None
    handler.setFormatter(JsonLinesFormatter() if json_lines else TextFormatter(TEXT_FORMAT))
    root = logging.getLogger()
    for old in _installed:
        root.removeHandler(old)
        old.close()
    root.addHandler(handler)
    _installed[:] = [handler]
    root.setLevel(level.upper())


class CurrentStderrHandler(logging.StreamHandler):
    """A StreamHandler on whatever sys.stderr is when a record is written, not when the
    handler was made (typer's test runner and pytest swap it)."""

    @property
    def stream(self) -> TextIO:
        return sys.stderr

    @stream.setter
    def stream(self, value: Any) -> None:
        """StreamHandler.__init__ assigns a stream; the current sys.stderr always wins."""


class TextFormatter(logging.Formatter):
    """The text format, with a failed job's error and traceback under its line, indented as
    logging shows an exception."""

    def format(self, record: logging.LogRecord) -> str:
        record.logger = logger_label(record.name)
        text = super().format(record)
        outcome: Outcome | None = getattr(record, "job_outcome", None)
        if outcome is None or outcome.status.word != "failed" or not outcome.failure[0]:
            return text
        error, traceback = outcome.failure
        lines = [error, *(traceback.splitlines() if traceback else [])]
        return "\n".join([text, *(f"    {line}" for line in lines)])


def logger_label(name: str) -> str:
    """How a text line names the logger `name`: `delayq` for delayq's own, else `name`."""
    return "delayq" if name == "delayq" or name.startswith("delayq.") else name


class JsonLinesFormatter(logging.Formatter):
    """One JSON object per record: time, level, logger, message, pid (which runner process
    of `--processes` wrote it), any exception, and the job_fields of the outcome the runner
    attached with `extra={"job_outcome": ...}`."""

    def format(self, record: logging.LogRecord) -> str:
        entry: dict[str, Any] = {
            "time": format_instant(record.created),
            "level": record.levelname.lower(),
            "logger": record.name,
            "message": record.getMessage(),
            "pid": record.process,
        }
        outcome = getattr(record, "job_outcome", None)
        if outcome is not None:
            entry.update(job_fields(outcome))
        if record.exc_info:
            entry["exception"] = self.formatException(record.exc_info)
        return json.dumps(entry, sort_keys=True, default=str, ensure_ascii=False)


def job_fields(outcome: Outcome) -> dict[str, Any]:
    """The per-job keys of a JSON log line, from the runner's Outcome: for a failure also
    error (its head line) and traceback (None when the failure had none)."""
    fields = {
        "job_id": outcome.id,
        "class": outcome.class_path,
        "method": outcome.method,
        "queue": outcome.queue,
        "attempt": outcome.attempt,
        "duration": round(outcome.duration, 6),
        "outcome": outcome.word,
        "will_retry": outcome.will_retry,
    }
    if outcome.status.word == "failed":
        fields["error"], fields["traceback"] = outcome.failure
    return fields
