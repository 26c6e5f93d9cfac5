"""Handler shapes for tests/worker/test_handlers.py: a class that counts how often it is created,
its static and class methods, a class that needs arguments, and foreign names reachable from
an allowed module (which the allowlist must not follow)."""

from __future__ import annotations

from pathlib import Path  # noqa: F401 - a foreign class reachable as shapes.Path
from typing import Any


def plain(data: Any) -> dict[str, Any]:
    return {"plain": data}


class Counter:
    """Counts its instances, so tests can see when resolve creates one."""

    created = 0

    def __init__(self) -> None:
        type(self).created += 1
        self.number = type(self).created

    def bump(self, data: Any) -> tuple[str, int, Any]:
        return ("bump", self.number, data)

    @staticmethod
    def fixed(data: Any) -> tuple[str, Any]:
        return ("static", data)

    @classmethod
    def build(cls, data: Any) -> tuple[str, Any]:
        return (cls.__name__, data)


class NeedsArguments:
    def __init__(self, token: str) -> None:
        self.token = token

    def run(self, data: Any) -> str:
        return self.token


class Inherits(dict):
    """Defines nothing itself: every method it has comes from a builtin class."""
