"""Classes from outside the allowlist of the tests that use foreign.py (which allow only
`tests.sample_handlers.foreign`): every piece of their code that runs notes itself in CALLS."""

from __future__ import annotations

from typing import Any

CALLS: list[str] = []


class NotingBase:
    def __init__(self) -> None:
        CALLS.append("NotingBase.__init__")

    def describe(self, data: Any) -> str:
        CALLS.append("NotingBase.describe")
        return "described"


class NotingNew:
    def __new__(cls) -> NotingNew:
        CALLS.append("NotingNew.__new__")
        return super().__new__(cls)


class NotingMeta(type):
    def __call__(cls, *args: Any, **kwargs: Any) -> Any:
        CALLS.append("NotingMeta.__call__")
        return super().__call__(*args, **kwargs)


class NotingCall:
    def __call__(self, data: Any) -> str:
        CALLS.append("NotingCall.__call__")
        return "called"
