"""What a failed attempt's row says: the head line `ExcType: message`, on one line so that
readers and greps of the message column keep working, then the traceback cut to fit the
column: each line to LINE_MAX characters (an exception's text may be megabytes), the whole to
TRACEBACK_MAX, keeping the innermost frames, which say where the handler failed, and leaving
out the runner's own frames above the handler.
"""

from __future__ import annotations

import traceback
from pathlib import Path
from types import TracebackType

from ..store.table import MESSAGE_MAX, TEXT_MAX, TRACEBACK_START, storable
from .interrupts import RUN_STOPS

LINE_MAX = 1000
TRACEBACK_MAX = TEXT_MAX - MESSAGE_MAX - 1  # head, newline, traceback: the column holds all
_WORKER_DIR = str(Path(__file__).parent)


def describe(exc: BaseException) -> str:
    """`TypeName: text` of a handler's exception, whatever its __str__ does, on one line."""
    try:
        text = str.__str__(str(exc))  # a plain str: a subclass may override formatting too
    except RUN_STOPS:
        raise
    except BaseException:  # noqa: BLE001 - a handler's exception may not even print
        text = "<unprintable>"
    head = f"{type(exc).__name__}: {text}" if text else type(exc).__name__
    return storable(head.replace("\r", "\\r").replace("\n", "\\n"))


def describe_with_traceback(exc: BaseException) -> str:
    """The head line, then the traceback of `exc` cut to fit; the head alone if the
    traceback cannot be formatted."""
    head = describe(exc)
    try:
        shown = traceback.TracebackException(type(exc), exc, _handler_frames(exc.__traceback__))
        lines = [
            storable(line if len(line) <= LINE_MAX else line[:LINE_MAX] + "…")
            for chunk in shown.format()
            for line in chunk.rstrip("\n").split("\n")
        ]
    except RUN_STOPS:
        raise
    except BaseException:  # noqa: BLE001 - the head line says what is known
        return head
    return f"{head}\n{_innermost(lines)}"


def _handler_frames(tb: TracebackType | None) -> TracebackType | None:
    """`tb` without the runner's frames that called the handler."""
    while tb is not None and tb.tb_next is not None:
        if not tb.tb_frame.f_code.co_filename.startswith(_WORKER_DIR):
            break
        tb = tb.tb_next
    return tb


def _innermost(lines: list[str]) -> str:
    """The last lines that fit in TRACEBACK_MAX, under the traceback's first line."""
    if not lines or not lines[0].startswith(TRACEBACK_START):
        lines = [TRACEBACK_START, *lines]
    kept: list[str] = []
    size = len(TRACEBACK_START) + 1
    for line in reversed(lines[1:]):
        if size + len(line) + 1 > TRACEBACK_MAX - 80:  # room for the note of what was cut
            cut = len(lines) - 1 - len(kept)
            kept.append(f"  ... {cut} outer lines left out ...")
            break
        kept.append(line)
        size += len(line) + 1
    return "\n".join([lines[0], *reversed(kept)])
