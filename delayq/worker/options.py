"""What one run, or a loop of runs, may be asked: `RunArguments`, declared here once, is what
`delayq run`, Queue.run and Queue.run_loop take; `RunOptions.build` checks it once where the
caller speaks, and the checked `RunOptions` is passed whole down to the pass. A
`--processes` child gets it back from the flags `argv` writes."""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from decimal import Decimal
from typing import TYPE_CHECKING, TypedDict

from ..base.durations import Duration, parse_duration
from ..config import MAX_CONCURRENCY, Settings, validate_queue_name
from ..errors import BadInput

if TYPE_CHECKING:  # for the type checker alone: typing.Unpack is new in Python 3.11
    from typing_extensions import Unpack

MAX_WEIGHT = 100
# The `delayq run` flag of each valued option.
FLAGS = {
    "limit": "--limit",
    "since": "--since",
    "max_seconds": "--max-seconds",
    "concurrency": "--concurrency",
    "grace": "--grace",
    "duration": "--for",
}


class RunArguments(TypedDict, total=False):
    """What a run may be asked, as a caller gives it; each is checked into the `RunOptions`
    field of the same name, and one not given (or None) leaves the setting of that name."""

    queues: Sequence[str] | None  # the queues to serve; none: every queue the index knows
    weights: Mapping[str, int] | None  # batches a queue takes in its turn while others wait
    limit: int | None  # at most this many jobs
    since: Duration | None  # how long overdue a job may be and still run (else missed)
    max_seconds: Duration | None  # the time budget: no job starts after it
    concurrency: int | None  # jobs in flight at once
    grace: Duration | None  # how long jobs in flight may finish after a stop signal


@dataclass(frozen=True)
class RunOptions:
    """A run's options, checked; None: the setting of the same name."""

    queues: tuple[str, ...]  # empty: every queue the index knows
    weights: Mapping[str, int]  # batches a queue takes in its turn while others wait (1)
    limit: int | None
    since: float | None
    max_seconds: float | None
    concurrency: int | None
    grace: float | None
    loop: bool
    duration: float | None  # how long a loop runs; None: until stopped

    @classmethod
    def build(
        cls,
        *,
        loop: bool = False,
        duration: Duration | None = None,
        **given: Unpack[RunArguments],
    ) -> RunOptions:
        """The options, or BadInput naming the one that is wrong; `duration` is how long a
        loop runs (None: until stopped)."""
        unknown = set(given) - set(RunArguments.__annotations__)
        if unknown:  # a caller's misspelt keyword: the TypedDict does not check at run time
            raise TypeError(f"unexpected run options: {', '.join(sorted(unknown))}")
        timed = {
            "since": given.get("since"),
            "max_seconds": given.get("max_seconds"),
            "grace": given.get("grace"),
            "duration": duration,
        }
        seconds = {
            name: None if value is None else parse_duration(value, FLAGS[name])
            for name, value in timed.items()
        }
        queues, limit = given.get("queues"), given.get("limit")
        concurrency = given.get("concurrency")
        if duration is not None and not loop:
            raise BadInput("--for needs --loop")
        if limit is not None and not _whole_between(limit, 1):
            raise BadInput("--limit must be at least 1")
        weights = dict(given.get("weights") or {})
        for name in [*(queues or ()), *weights]:
            validate_queue_name(name)
        for name, weight in weights.items():
            if not _whole_between(weight, 1, MAX_WEIGHT):
                raise BadInput(f"queue {name}: a weight is a whole number from 1 to {MAX_WEIGHT}")
        if concurrency is not None and not _whole_between(concurrency, 1, MAX_CONCURRENCY):
            raise BadInput(f"--concurrency must be between 1 and {MAX_CONCURRENCY}")
        # A queue named twice is served once (and so a child reads back the same queues).
        unique = tuple(dict.fromkeys(queues or ()))
        return cls(unique, weights, limit, concurrency=concurrency, loop=loop, **seconds)

    def applied_to(self, settings: Settings) -> Settings:
        """`settings` with the window, time budget, concurrency and grace asked for here."""
        names = ("since", "max_seconds", "concurrency", "grace")
        asked = {name: value for name in names if (value := getattr(self, name)) is not None}
        return replace(settings, **asked)

    def argv(self) -> list[str]:
        """These options as `delayq run` flags, which the command reads back into an equal
        RunOptions: how a `--processes` child is told them."""
        flags = [f"--queue={queue}" for queue in self.queues]
        if self.weights:
            flags.append("--queues=" + ",".join(f"{q}:{w}" for q, w in self.weights.items()))
        valued = {flag: getattr(self, name) for name, flag in FLAGS.items()}
        flags += [f"{flag}={_text(value)}" for flag, value in valued.items() if value is not None]
        return flags + ["--loop"] * self.loop


def _text(value: float) -> str:
    """A number as the shortest text that reads back as the same float, without the
    exponent (1e-05) a duration does not take."""
    return str(value) if isinstance(value, int) else f"{Decimal(repr(value)):f}"


def _whole_between(value: object, low: int, high: float = math.inf) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and low <= value <= high
