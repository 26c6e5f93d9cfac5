"""Handlers that PHP producers' jobs reach through DELAYQ_PHP_CLASSES; each logs the data it
was given, as JSON, so a test sees exactly what arrived."""

from __future__ import annotations

import json
from typing import Any

from tests.sample_handlers.jobs import _append


class Refund:
    def run(self, data: dict[str, Any]) -> str:
        _append(data["log"], "refund " + json.dumps(data, sort_keys=True, ensure_ascii=False))
        return f"refunded {data['order']}"

    def fail(self, data: dict[str, Any]) -> None:
        _append(data["log"], f"fail {data['order']}")
        raise ValueError(f"refund of {data['order']} refused")
