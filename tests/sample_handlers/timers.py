"""Handlers that `delayq listen` jobs call: each returns the key and args it was given, so
the row's message shows what arrived."""

from __future__ import annotations

from typing import Any


class Timers:
    def fire(self, data: dict[str, Any]) -> str:
        return f"fired {data['key']} {data['args']}"


class Countdown:
    """Seed 000's PHP class PTCountdown, mapped through DELAYQ_PHP_CLASSES."""

    def countdown(self, data: dict[str, Any]) -> str:
        return f"countdown {data['args']}"
