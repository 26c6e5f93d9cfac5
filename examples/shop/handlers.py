"""What a shop schedules: refund an unanswered after-sales request, auto-confirm receipt,
text a referred user. Each handler takes the job's data and returns a short result."""

from __future__ import annotations

from typing import Any

from delayq import NoRetry


class AfterSales:
    """Instance methods: delayq creates the class with no arguments, then calls the method."""

    def refund(self, data: dict[str, Any]) -> str:
        return f"refunded request {data['request']} ({data.get('amount', 0)} EUR)"


def confirm_receipt(data: dict[str, Any]) -> str:
    return f"order {data['order']} confirmed as received"


def text_referral(data: dict[str, Any]) -> str:
    if data.get("phone") is None:
        raise NoRetry("no phone number on file")  # retrying will not help
    raise ConnectionError("SMS gateway timed out")  # retried on the ladder
