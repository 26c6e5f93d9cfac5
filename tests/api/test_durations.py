"""delayq.base.durations: durations as seconds, ISO 8601 instants as epoch seconds, and the
refusals (BadInput naming the option) for anything else."""

from __future__ import annotations

import os
import time
from collections.abc import Iterator
from datetime import datetime, timezone

import pytest

from delayq.base.durations import (
    format_delta,
    format_duration,
    format_instant,
    parse_duration,
    parse_instant,
)
from delayq.errors import BadInput

# 2026-01-01T00:00:00Z
NEW_YEAR_UTC = 1_767_225_600.0


@pytest.fixture
def local_zone() -> Iterator[None]:
    """Pin local time to UTC+9 (Asia/Tokyo has no daylight saving) for the test."""
    saved = os.environ.get("TZ")
    os.environ["TZ"] = "Asia/Tokyo"
    time.tzset()
    yield
    if saved is None:
        del os.environ["TZ"]
    else:
        os.environ["TZ"] = saved
    time.tzset()


@pytest.mark.parametrize(
    ("text", "seconds"),
    [
        ("0", 0.0),
        ("90", 90.0),
        ("2.5", 2.5),
        ("90s", 90.0),
        ("15m", 900.0),
        ("2h", 7200.0),
        ("1d", 86400.0),
        ("1w", 604800.0),
        ("1.5m", 90.0),
        ("0.5h", 1800.0),
        ("0.25d", 21600.0),
        ("2H", 7200.0),
        (" 15 m ", 900.0),
    ],
)
def test_duration_text_is_seconds(text, seconds):
    assert parse_duration(text) == seconds


@pytest.mark.parametrize(("number", "seconds"), [(0, 0.0), (45, 45.0), (1.25, 1.25)])
def test_a_number_is_already_seconds(number, seconds):
    result = parse_duration(number)

    assert result == seconds
    assert isinstance(result, float)


@pytest.mark.parametrize("value", ["-5", "-5s", "-0.5m", -1, -0.001])
def test_negative_duration_is_bad_input(value):
    with pytest.raises(BadInput, match="non-negative"):
        parse_duration(value, "--delay")


@pytest.mark.parametrize("value", [float("nan"), float("inf")])
def test_duration_that_is_not_finite_is_bad_input(value):
    with pytest.raises(BadInput):
        parse_duration(value)


@pytest.mark.parametrize("text", ["", "soon", "5x", "5 minutes", "1e3", "1h30m", "s", "--5"])
def test_garbage_duration_is_bad_input_naming_the_option(text):
    with pytest.raises(BadInput, match="--since") as caught:
        parse_duration(text, "--since")

    assert "90s, 15m, 2h, 1d" in str(caught.value)


def test_instant_with_an_offset_is_that_moment_whatever_the_local_zone(local_zone):
    assert parse_instant("2026-01-01T09:00:00+09:00") == NEW_YEAR_UTC
    assert parse_instant("2026-01-01T01:00:00+01:00") == NEW_YEAR_UTC
    assert parse_instant("2025-12-31T19:00:00-05:00") == NEW_YEAR_UTC
    assert parse_instant("2026-01-01T00:00:00Z") == NEW_YEAR_UTC
    assert parse_instant("2026-01-01T00:00:00.250+00:00") == NEW_YEAR_UTC + 0.25


@pytest.mark.parametrize(
    "text", ["2026-01-01T09:00:00", "2026-01-01 09:00", " 2026-01-01T09:00:00 ", "2026-01-01"]
)
def test_instant_without_an_offset_is_refused_not_read_as_local_time(local_zone, text):
    # Local time would be the zone of whoever ran `add` (here Tokyo), a guess for the job.
    with pytest.raises(BadInput, match=r"has no time zone; add Z \(UTC\) or \+HH:MM"):
        parse_instant(text)


def test_a_lower_case_z_is_utc_too():
    assert parse_instant("2026-01-01T00:00:00z") == NEW_YEAR_UTC


@pytest.mark.parametrize(
    "text", ["tomorrow", "", "2026-13-01T00:00:00", "2026-01-01T25:00", "1767225600", "next week"]
)
def test_garbage_instant_is_bad_input_with_an_example(text):
    with pytest.raises(BadInput, match="ISO 8601") as caught:
        parse_instant(text)

    assert "2026-11-22T18:30:00+01:00" in str(caught.value)


def test_format_instant_is_local_iso_8601_that_parses_back(local_zone):
    text = format_instant(NEW_YEAR_UTC + 0.5)

    assert text == "2026-01-01T09:00:00.500+09:00"
    assert parse_instant(text) == NEW_YEAR_UTC + 0.5
    assert datetime.fromisoformat(text).astimezone(timezone.utc).year == 2026


def test_format_instant_of_an_unknown_time_is_a_dash():
    assert format_instant(None) == "-"


@pytest.mark.parametrize(
    ("seconds", "text"),
    [(45, "45s"), (90, "1.5m"), (720, "12m"), (10800, "3h"), (172800, "2d"), (-120, "-2m")],
)
def test_format_delta_is_short(seconds, text):
    assert format_delta(seconds) == text


@pytest.mark.parametrize(
    ("seconds", "text"),
    [(0, "0s"), (0.25, "0.25s"), (45, "45s"), (5400, "90m"), (129600, "36h"), (86400, "1d")]
    + [(1_234_567, "1234567s"), (60_000_060, "1000001m"), (3650 * 86400, "3650d")],
)
def test_format_duration_is_the_largest_whole_unit_and_reads_back(seconds, text):
    assert format_duration(seconds) == text
    assert parse_duration(text) == seconds
