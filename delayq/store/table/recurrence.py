"""When a recurring job is next due, by its period (`every`) or its cron schedule: the checks
of `--cron` and `--tz`, and the `schedule` column's text ("0 9 * * MON-FRI Europe/Berlin").

cronsim matches as Debian's cron does across DST changes: a time the spring change skips
runs at the change; a fixed time the autumn change repeats runs once, while `*` in the
minute or hour runs through both passes of that hour.
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import datetime
from itertools import islice
from typing import Any
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from cronsim import CronSim, CronSimError

from ...base.durations import shown
from ...errors import BadInput
from .model import ClaimedJob, Job

DEFAULT_ZONE = "UTC"
CRON_MAX = 120  # characters; with the longest zone name it fits the column's 255
ZONE_MAX = 64
FIELDS = 5
LOOK_AHEAD = 10  # matches read past one that lies before the start (see first_after)
_FIELD = re.compile(r"[0-9A-Za-z*,/#-]+")
# IANA names: letters, digits, `_+-`, components joined by `/`; never `.`, so never `..`.
_ZONE = re.compile(r"[A-Za-z0-9_+-]+(/[A-Za-z0-9_+-]+)*")


@dataclass(frozen=True)
class CronSchedule:
    """A cron expression read in one time zone."""

    expression: str
    zone: str

    @property
    def column(self) -> str:
        """The text the `schedule` column holds."""
        return f"{self.expression} {self.zone}"

    def first_after(self, moment: float) -> float:
        """The first match strictly after epoch `moment`. Started in the hour the autumn
        change repeats, cronsim may first yield that hour's first pass, before `moment`:
        only a later match counts, so a fixed time never runs twice."""
        for match in islice(self._matches(moment), LOOK_AHEAD):
            if match.timestamp() > moment:
                return match.timestamp()
        raise BadInput(f"cron {self.expression!r} has no match after {moment:.0f}")

    def first_from(self, moment: float) -> float:
        """The first match at or after epoch `moment` (matches are whole minutes)."""
        return self.first_after(math.ceil(moment) - 1)

    def next_after(self, due: float, now: float) -> float:
        """The occurrence after the one due at `due`, skipping those past at `now` (no burst)."""
        return self.first_after(max(due, now))

    def _matches(self, start: float) -> Iterator[datetime]:
        try:
            yield from CronSim(self.expression, datetime.fromtimestamp(start, ZoneInfo(self.zone)))
        except (CronSimError, StopIteration, ValueError, OverflowError):
            return


def parse_schedule(expression: Any, zone: Any = None) -> CronSchedule:
    """A checked CronSchedule, or BadInput saying what is wrong with it."""
    schedule = CronSchedule(_check_expression(expression), _check_zone(zone))
    try:
        CronSim(schedule.expression, datetime(2000, 1, 1, tzinfo=ZoneInfo(schedule.zone)))
    except CronSimError as exc:
        if _valid_in_some_month(schedule.expression):
            raise BadInput(
                f"--cron {schedule.expression!r} is a cron expression that never fires: no month"
                " it names has that day"
            ) from None
        raise BadInput(f"--cron {schedule.expression!r} is not a cron expression: {exc}") from None
    return schedule


def _valid_in_some_month(expression: str) -> bool:
    """Whether the expression reads in every month (`0 0 31 2 *`: a day February lacks)."""
    minute, hour, day, _, weekday = expression.split()
    try:
        CronSim(f"{minute} {hour} {day} * {weekday}", datetime(2000, 1, 1))
    except CronSimError:
        return False
    return True


def _check_expression(expression: Any) -> str:
    if not isinstance(expression, str):
        raise BadInput(f"--cron must be text, not {type(expression).__name__}")
    if len(expression) > CRON_MAX:
        raise BadInput(f"--cron is {len(expression)} characters; the limit is {CRON_MAX}")
    fields = expression.split()
    if len(fields) != FIELDS or not all(_FIELD.fullmatch(field) for field in fields):
        raise BadInput(
            f"--cron {shown(expression)} is not five cron fields "
            '(minute hour day month weekday, e.g. "0 9 * * MON-FRI")'
        )
    return " ".join(fields)


def _check_zone(zone: Any) -> str:
    if zone is None:
        return DEFAULT_ZONE
    if not isinstance(zone, str):
        raise BadInput(f"--tz must be text, not {type(zone).__name__}")
    if len(zone) > ZONE_MAX or not _ZONE.fullmatch(zone):
        raise BadInput(f"--tz {shown(zone)} is not a time zone name such as Europe/Berlin")
    try:
        ZoneInfo(zone)
    except (ZoneInfoNotFoundError, ValueError, OSError):
        raise BadInput(f"--tz {zone!r} is not a known time zone (e.g. Europe/Berlin)") from None
    return zone


def is_recurring(job: Job | ClaimedJob) -> bool:
    """Whether settling `job` re-arms a series: it has a period or a cron schedule."""
    return job.every is not None or job.schedule is not None


def next_due(job: Job | ClaimedJob, now: float) -> float:
    """The due time of recurring `job`'s next occurrence, from its own due time. BadInput
    if its schedule column holds no schedule delayq can read (another writer left it)."""
    due = job.run_at or now
    if job.schedule is not None:
        expression, _, zone = job.schedule.rstrip().rpartition(" ")
        return parse_schedule(expression, zone).next_after(due, now)
    assert job.every is not None
    # The previous due plus whole periods, skipping periods already past rather than
    # running them in a burst, so the series never drifts.
    return due + max(1, math.floor((now - due) / job.every) + 1) * job.every
