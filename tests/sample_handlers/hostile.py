"""Handlers that try to stop the queue that runs them: text UTF-8 cannot hold, exceptions
that are not Exceptions, results that cannot be shown, processes that fork. Each appends a
line to data["log"] first, so tests count calls from the handler's own side."""

from __future__ import annotations

import asyncio
import os
import sys
import time
from pathlib import Path
from typing import Any

from .jobs import _append

SURROGATE = "\udcff"  # what os.fsdecode makes of the byte 0xff in a file name


class Unraisable(BaseException):
    """Neither an Exception nor one of Python's own: what a library's 'abort' might be."""


class Unprintable(Exception):
    def __str__(self) -> str:
        raise Unraisable("no text either")


class _Sly(str):
    """Text that will not be formatted or sliced."""

    def __format__(self, spec: str) -> str:
        raise RuntimeError("no format")

    def __getitem__(self, key: Any) -> str:
        raise RuntimeError("no slices")


class SlyText(Exception):
    def __str__(self) -> str:
        return _Sly("sly")


class Unshowable:
    """A result whose repr fails."""

    def __repr__(self) -> str:
        raise RuntimeError("cannot repr")


RAISES: dict[str, Any] = {
    "KeyboardInterrupt": KeyboardInterrupt,
    "SystemExit": lambda: SystemExit(3),
    "GeneratorExit": GeneratorExit,
    "Unraisable": lambda: Unraisable("stop everything"),
    "Unprintable": Unprintable,
    "SlyText": SlyText,
    "surrogate": lambda: ValueError(f"cannot open report-{SURROGATE}.csv"),
}


def surrogate_result(data: dict[str, Any]) -> str:
    """Return a file name as os.listdir gives it for a name that is not UTF-8."""
    _append(data["log"], f"surrogate {data.get('n', '')}")
    return f"wrote report-{SURROGATE}.csv"


def raise_(data: dict[str, Any]) -> None:
    """Raise the exception named data["raise"] (a key of RAISES)."""
    _append(data["log"], f"raise {data['raise']}")
    raise RAISES[data["raise"]]()


async def raise_async(data: dict[str, Any]) -> None:
    _append(data["log"], f"raise {data['raise']}")
    await asyncio.sleep(0)
    raise RAISES[data["raise"]]()


def unshowable(data: dict[str, Any]) -> object:
    """Return a result that cannot be turned into text: data["kind"] says how."""
    _append(data["log"], f"unshowable {data['kind']}")
    if data["kind"] == "repr":
        return Unshowable()
    if data["kind"] == "huge int":  # past int's digit limit for str() and repr()
        # The limit came with 3.10.7 (3.11 for vermin); before it, a million digits print.
        return 10 ** (getattr(sys, "get_int_max_str_digits", lambda: 10**6)() + 10)
    nested: list[Any] = []
    for _ in range(100_000):
        nested = [nested]
    return nested


def fork(data: dict[str, Any]) -> str:
    """Fork; the child appends its pid and returns into its caller, as the parent does."""
    _append(data["log"], "fork")
    pid = os.fork()
    if pid == 0:
        _append(data["log"], f"child {os.getpid()}")
        return "child"
    os.waitpid(pid, 0)
    return "parent"


async def fork_async(data: dict[str, Any]) -> str:
    return fork(data)


def first_call_waits(data: dict[str, Any]) -> str:
    """The first call (no "start" line in the log yet) waits until the file data["gate"]
    exists; later calls return at once. Each says which run made it."""
    first = not Path(data["log"]).exists()
    _append(data["log"], f"start {os.getpid()}")
    gate = Path(data["gate"])
    deadline = time.monotonic() + 60
    while first and not gate.exists() and time.monotonic() < deadline:
        time.sleep(0.01)
    _append(data["log"], f"done {os.getpid()}")
    return f"ran in {os.getpid()}"


def fail_deep(data: dict[str, Any]) -> None:
    """Recurse data["depth"] calls deep: past the interpreter's limit, a RecursionError. With
    data["alternate"], down two functions calling each other, so that no repeat folds the
    traceback's lines, to a LookupError at the bottom."""
    _append(data["log"], "fail_deep")
    (_ping if data.get("alternate") else _descend)(data["depth"])


def _descend(depth: int) -> None:
    _descend(depth - 1)


def _ping(depth: int) -> None:
    if depth <= 0:
        raise LookupError("bottom reached")
    _pong(depth - 1)


def _pong(depth: int) -> None:
    _ping(depth - 1)


def fail_with(data: dict[str, Any]) -> None:
    """Raise a ValueError whose text is data["text"] repeated data["times"] times."""
    _append(data["log"], "fail_with")
    raise ValueError(data["text"] * data.get("times", 1))
