"""Handlers with retry policies of their own, and handlers that raise RetryLater. Each call
appends a line to data["log"], as in jobs.py, so tests count calls without trusting delayq."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import delayq
from tests.sample_handlers.jobs import _append, read_log


@delayq.retry_policy(retries=2, delays=["10s", "1m"])
def flaky(data: dict[str, Any]) -> None:
    _append(data["log"], "flaky")
    raise RuntimeError("upstream down")


@delayq.retry_policy(delays=[5])
def one_step(data: dict[str, Any]) -> None:
    _append(data["log"], "one_step")
    raise RuntimeError("still down")


class Billing:
    """A handler class whose method declares its policy, as a business handler would."""

    @delayq.retry_policy(retries=1, delays=[timedelta(minutes=2)])
    def charge(self, data: dict[str, Any]) -> None:
        _append(data["log"], "charge")
        raise RuntimeError("card declined")


def rate_limited(data: dict[str, Any]) -> str:
    """Defer with data["after"] (default 3600) the first data["times"] (default 1) calls,
    then succeed: an API answering 429 with Retry-After."""
    calls = len(read_log(data["log"]))
    _append(data["log"], "rate_limited")
    if calls < int(data.get("times", 1)):
        raise delayq.RetryLater(data.get("after", 3600), "rate limited")
    return "sent"


def always_later(data: dict[str, Any]) -> None:
    _append(data["log"], "always_later")
    raise delayq.RetryLater(0)


def later_by(data: dict[str, Any]) -> None:
    """RetryLater with whatever delay data["after"] holds, a wrong one included."""
    _append(data["log"], "later_by")
    raise delayq.RetryLater(data["after"])


def later_by_timedelta(data: dict[str, Any]) -> None:
    _append(data["log"], "later_by_timedelta")
    raise delayq.RetryLater(timedelta(minutes=5), "quota")


def later_by_hostile_text(data: dict[str, Any]) -> None:
    _append(data["log"], "later_by_hostile_text")
    raise delayq.RetryLater("1m\udcff\x1b[2J", "\udcff")


@delayq.retry_policy(retries=0)
async def async_later(data: dict[str, Any]) -> None:
    """A coroutine's RetryLater and policy are read as a plain function's."""
    _append(data["log"], "async_later")
    if data.get("fail"):
        raise RuntimeError("down")
    raise delayq.RetryLater("30s", "busy")


class SneakyLater(delayq.RetryLater):
    """A RetryLater whose delay is code: reading it must not run it outside the call."""

    @property  # type: ignore[override]
    def delay(self) -> float:
        raise SystemExit("read outside the handler")

    @delay.setter
    def delay(self, value: object) -> None:
        pass


def later_sneakily(data: dict[str, Any]) -> None:
    _append(data["log"], "later_sneakily")
    raise SneakyLater(60)
