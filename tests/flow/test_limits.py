"""A queue's limits as the user writes them (delayq/flow/limits.py: parse_rate,
parse_concurrency_limit), through the API and the command line: a bad rate or concurrency
limit is refused before anything is written (BadInput; on the command line one line on stderr
and exit 2, as are `delayq limit`'s other refusals), and a limit must name what it sets."""

from __future__ import annotations

import pytest

import delayq
from delayq.errors import BadInput
from tests.flow.test_concurrency_limits import NOW, add_many
from tests.flow.test_rate_limits import add
from tests.support.invoke import invoke


@pytest.mark.parametrize("rate", ["0/s", "10/x", "-1/s", "100001/s", "99999999999999999/h", "x"])
def test_a_bad_rate_limits_nothing(queue: delayq.Queue, rate: str) -> None:
    with pytest.raises(delayq.BadInput):
        queue.limit("sms", rate=rate)
    assert queue.limited() == {}


@pytest.mark.parametrize(
    "value, message",
    [
        (0, "invalid concurrency 0: it must be between 1 and 10,000"),
        (10_001, "it must be between 1 and 10,000"),
        (-3, "invalid concurrency -3: expected a whole number"),
        (2.5, "invalid concurrency 2.5: expected a whole number"),
        (True, "invalid concurrency True"),
        ("4", None),
        ("four", "invalid concurrency 'four': expected a whole number"),
        ("\ud800", "invalid concurrency '\\ud800'"),
        (10**400, "it must be between 1 and 10,000"),
    ],
)
def test_bad_limits_are_refused_and_write_nothing(
    queue: delayq.Queue, log: str, value: object, message: str | None
) -> None:
    add_many(queue, log, 1)
    if message is None:
        assert queue.limit("x", concurrency=value, now=NOW)["x"].concurrency == 4  # type: ignore[arg-type]
        return
    with pytest.raises(BadInput) as refused:
        queue.limit("x", concurrency=value, now=NOW)  # type: ignore[arg-type]
    assert message in str(refused.value) and "\n" not in str(refused.value)
    assert queue.limited() == {}


def test_a_limit_must_name_what_it_sets(queue: delayq.Queue, log: str) -> None:
    add_many(queue, log, 1)
    with pytest.raises(BadInput, match="give rate= or concurrency="):
        queue.limit("x", now=NOW)
    assert queue.limited() == {}


@pytest.mark.parametrize(
    "case",
    [
        (("sms", "--rate", "0/s"), "invalid rate '0/s': the count must be between 1 and 100,000"),
        (("sms", "--rate", "10/x"), "invalid rate '10/x': expected starts per s, m or h"),
        (("sms", "--rate", "-5/s"), "invalid rate '-5/s'"),
        (("sms", "--rate", "100001/h"), "the count must be between 1 and 100,000"),
        (("sms", "--rate", "9" * 5000 + "/s"), "the count must be between 1 and 100,000"),
        (("sms", "--rate", "junk"), "invalid rate 'junk'"),
        (("sms",), "give --rate N/UNIT (like --rate 10/s), --concurrency N (like --concurrency 4)"),
        (("sms", "--rate", "5/s", "--clear"), "give --rate N/UNIT"),
        (("sms", "--concurrency", "2", "--clear"), "give --rate N/UNIT"),
        (("sms", "--concurrency", "0"), "invalid concurrency '0': it must be between 1 and 10,000"),
        (("sms", "--concurrency", "10001"), "it must be between 1 and 10,000"),
        (("sms", "--concurrency", "9" * 5000), "it must be between 1 and 10,000"),
        (("sms", "--concurrency", "-1"), "invalid concurrency '-1': expected a whole number"),
        (("sms", "--concurrency", "2.5"), "invalid concurrency '2.5': expected a whole number"),
        (("sms", "--concurrency", "٣"), "invalid concurrency '٣': expected a whole number"),
        (("sms", "--concurrency", "4\x00"), "invalid concurrency '4\\x00'"),
        (("sms", "--concurrency", "2", "--rate", "0/s"), "invalid rate '0/s'"),
        (("smss", "--rate", "5/s"), "cannot limit 'smss': no job has used that queue"),
        (("bad name", "--rate", "5/s"), "queue name 'bad name' must be 1-64 characters"),
        (("smss", "--clear"), "cannot limit 'smss': no job has used that queue"),
        (("--rate", "5/s"), "Missing argument 'NAME...'"),
    ],
)
def test_bad_input_is_one_line_exit_2_and_limits_nothing(
    queue: delayq.Queue, cli_env: dict[str, str], log: str, case: tuple[tuple[str, ...], str]
) -> None:
    args, message = case
    add(queue, log)
    result = invoke(cli_env, "limit", *args)
    assert result.exit_code == 2
    assert result.stdout == ""
    assert message in result.stderr and len(result.stderr.strip().splitlines()) == 1
    assert queue.limited() == {}
