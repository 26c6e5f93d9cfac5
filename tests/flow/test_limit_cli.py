"""`delayq limit` from the command line: what it prints, what it refuses (one line on stderr,
exit 2, nothing written), and how `status` shows a rate-limited queue to someone who never
read the docs."""

from __future__ import annotations

import json
import time

import pytest

import delayq
from tests.support.invoke import invoke

H = "tests.sample_handlers.jobs"


def add(queue: delayq.Queue, log: str) -> int:
    return queue.add(H, "record", {"log": log}, queue="sms", at=time.time() - 1)


def limit_says(cli_env: dict[str, str], *args: str) -> str:
    """What `delayq limit ARGS` prints, having checked that it succeeded."""
    result = invoke(cli_env, "limit", *args)
    assert result.exit_code == 0 and result.stderr == ""
    return result.stdout


def test_limit_says_what_it_means_and_clear_lifts_it(
    queue: delayq.Queue, cli_env: dict[str, str], log: str
) -> None:
    add(queue, log)
    assert limit_says(cli_env, "sms", "--rate", "600/m") == (
        "sms: at most 600 job starts a minute (600/m) across all runners; due jobs beyond "
        "that wait in order (`delayq limit sms --clear` lifts it)\n"
    )
    assert queue.limited()["sms"].rate == (600, 60.0)

    status = invoke(cli_env, "status")
    assert "sms (600/m)" in status.stdout
    assert "sms: at most 600 job starts a minute (600/m) across all runners" in status.stdout
    assert json.loads(invoke(cli_env, "status", "--json").stdout)["queues"]["sms"]["rate"] == (
        "600/m"
    )

    cleared = invoke(cli_env, "limit", "sms", "--clear")
    assert cleared.stdout == "sms: no limits; runners start its due jobs as fast as they can\n"
    assert queue.limited() == {}
    assert json.loads(invoke(cli_env, "status", "--json").stdout)["queues"]["sms"]["rate"] is None


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


def test_metrics_give_each_limited_queues_rate_as_starts_a_second(
    queue: delayq.Queue, cli_env: dict[str, str], log: str
) -> None:
    from prometheus_client.parser import text_string_to_metric_families

    add(queue, log)
    queue.add(H, "record", {"log": log}, queue="email")
    queue.limit("sms", rate="30/m")

    result = invoke(cli_env, "metrics")

    assert result.exit_code == 0, result.output
    rates = {
        sample.labels["queue"]: sample.value
        for family in text_string_to_metric_families(result.stdout)
        for sample in family.samples
        if sample.name == "delayq_queue_rate_limit"
    }
    assert rates == {"sms": 0.5}


def test_the_web_overview_marks_a_limited_queue_with_its_rate(
    queue: delayq.Queue, log: str
) -> None:
    pytest.importorskip("starlette")
    from tests.flow.test_pause_web import row_of
    from tests.web.test_web import client_of

    add(queue, log)
    client = client_of(queue)
    assert "limited to" not in row_of(client.get("/").text, "sms")
    queue.limit("sms", rate="10/s")
    assert ">limited to 10/s</span>" in row_of(client.get("/").text, "sms")
    assert "at once" not in row_of(client.get("/").text, "sms")
    queue.limit("sms", concurrency=3)
    assert ">3 at once</span>" in row_of(client.get("/").text, "sms")


def test_peek_says_a_jobs_queue_is_rate_limited(
    queue: delayq.Queue, cli_env: dict[str, str], log: str
) -> None:
    add(queue, log)
    queue.limit("sms", rate="10/s")
    assert "(queue limited to 10/s)" in invoke(cli_env, "peek").stdout
    assert json.loads(invoke(cli_env, "peek", "--json").stdout)["jobs"][0]["rate"] == "10/s"


def test_a_concurrency_limit_reads_in_every_look_and_clear_lifts_both(
    queue: delayq.Queue, cli_env: dict[str, str], log: str
) -> None:
    from prometheus_client.parser import text_string_to_metric_families

    add(queue, log)
    assert limit_says(cli_env, "sms", "--concurrency", "4") == (
        "sms: at most 4 jobs running at once across all runners; due jobs beyond that wait in "
        "order (`delayq limit sms --clear` lifts it)\n"
    )
    both = invoke(cli_env, "limit", "sms", "--rate", "10/s")  # the concurrency stays
    assert both.stdout.startswith(
        "sms: at most 10 job starts a second (10/s) and at most 4 jobs running at once"
    )
    assert both.stdout.endswith("(`delayq limit sms --clear` lifts them)\n")

    status = invoke(cli_env, "status")
    assert "sms (10/s) (4 at once)" in status.stdout
    assert "sms: at most 10 job starts a second (10/s) and at most 4 jobs running" in status.stdout
    reported = json.loads(invoke(cli_env, "status", "--json").stdout)["queues"]["sms"]
    assert (reported["rate"], reported["concurrency"]) == ("10/s", 4)
    assert "(queue limited to 4 at once)" in invoke(cli_env, "peek").stdout
    assert json.loads(invoke(cli_env, "peek", "--json").stdout)["jobs"][0]["concurrency"] == 4
    metrics = invoke(cli_env, "metrics").stdout
    limits = {
        sample.labels["queue"]: sample.value
        for family in text_string_to_metric_families(metrics)
        for sample in family.samples
        if sample.name == "delayq_queue_concurrency_limit"
    }
    assert limits == {"sms": 4.0}

    assert invoke(cli_env, "limit", "sms", "--clear").exit_code == 0
    assert queue.limited() == {}
    reported = json.loads(invoke(cli_env, "status", "--json").stdout)["queues"]["sms"]
    assert (reported["rate"], reported["concurrency"]) == (None, None)
