"""Jobs whose params a PHP producer wrote with serialize(): read as well as JSON, PHP class
names mapped to Python handlers through DELAYQ_PHP_CLASSES (and the allowlist still
deciding), PHP arrays and objects as lists and dicts, and malformed text failing its own job
with a reason while the run goes on. The real PHP producer is in test_php_producer.py."""

from __future__ import annotations

import json
from datetime import datetime, timezone
from pathlib import Path

import pytest

from delayq.config import load_settings
from delayq.errors import BadInput, ConfigError
from delayq.ops.overview import JobFilter
from delayq.store.table.model import Job, Status
from delayq.store.table.params import read_call
from tests.sample_handlers.jobs import read_log

NOW = 1_800_000_000.0
REFUND = "tests.sample_handlers.php_shop.Refund"
CLASSES = {"App\\Jobs\\Refund": REFUND}


def php_string(text: str) -> str:
    return f's:{len(text.encode())}:"{text}";'


def php_params(class_name: str, method: str, data: str) -> str:
    """serialize(['class' => ..., 'method' => ..., 'data' => ...]) with `data` given serialized."""
    return (
        "a:3:{"
        + php_string("class")
        + php_string(class_name)
        + php_string("method")
        + php_string(method)
        + php_string("data")
        + data
        + "}"
    )


def php_order(log: str, order: int) -> str:
    return "a:2:{" + php_string("log") + php_string(log) + php_string("order") + f"i:{order};}}"


def test_php_arrays_become_lists_and_dicts_and_objects_their_properties():
    data = (
        "a:5:{"
        + php_string("items")
        + 'a:2:{i:0;s:1:"x";i:1;d:1.5;}'
        + php_string("sparse")
        + "a:2:{i:3;b:1;i:7;N;}"
        + php_string("empty")
        + "a:0:{}"
        + php_string("note")
        + php_string("crème 😀")
        + php_string("customer")
        + 'O:8:"Customer":2:{s:4:"name";s:3:"Ann";s:7:"\0*\0tier";i:2;}'
        + "}"
    )

    call = read_call(php_params("\\App\\Jobs\\Refund", "run", data), CLASSES)

    assert call.class_path == REFUND and call.method == "run"
    assert call.data == {
        "items": ["x", 1.5],
        "sparse": {"3": True, "7": None},
        "empty": [],
        "note": "crème 😀",
        "customer": {"name": "Ann", "tier": 2},
    }


@pytest.mark.parametrize(
    ("params", "reason"),
    [
        ('a:3:{s:5:"class";s:15:"App\\Jobs\\Refund";s:6:"method";s:3:"ru', "malformed PHP"),
        ('a:1:{s:5:"class";s:99:"App";}', "malformed PHP"),
        ("a:1:{a:0:{}i:1;}", "malformed PHP"),
        ('a:1:{i:0;s:1:"\xff";}', "malformed PHP"),
        ("a:0:{}trailing", "text follows the PHP-serialized value"),
        ('a:1:{i:0;s:1:"x";}', "PHP value is not an array with keys"),
        ('a:2:{s:5:"class";i:1;s:6:"method";s:3:"run";}', '"class" and "method" must be strings'),
    ],
)
def test_malformed_php_params_raise_bad_input_saying_why(params, reason):
    with pytest.raises(BadInput, match="bad params") as caught:
        read_call(params, CLASSES)
    assert reason in str(caught.value)


def test_an_unmapped_php_class_names_the_variable_to_set():
    with pytest.raises(BadInput, match=r"map it in DELAYQ_PHP_CLASSES"):
        read_call(php_params("App\\Jobs\\Sms", "send", "N;"), CLASSES)
    # A PHP producer may write a Python path itself; the allowlist then decides.
    assert read_call(php_params(REFUND, "run", "N;"), {}).class_path == REFUND


def test_php_classes_come_from_the_environment_or_the_config_file(tmp_path: Path):
    environ = {"DELAYQ_PHP_CLASSES": "App\\Jobs\\Refund=shop.jobs.Refund, \\App\\Sms=shop.sms"}
    assert load_settings(environ, None).php_classes == (
        ("App\\Jobs\\Refund", "shop.jobs.Refund"),
        ("App\\Sms", "shop.sms"),
    )
    path = tmp_path / "delayq.toml"
    path.write_text('[php_classes]\n"App\\\\Jobs\\\\Refund" = "shop.jobs.Refund"\n')
    assert load_settings({}, path).php_classes == (("App\\Jobs\\Refund", "shop.jobs.Refund"),)
    for bad in ("App\\Jobs\\Refund", "App\\Jobs\\Refund=shop/jobs", "App Jobs=shop.jobs"):
        with pytest.raises(ConfigError, match="DELAYQ_PHP_CLASSES entry"):
            load_settings({"DELAYQ_PHP_CLASSES": bad}, None)


def plant(queue, params: str) -> int:
    """A row as the seed's producers write it: params, status 1, then ZADD."""
    job = Job.create(params=params, status=Status.PENDING)
    queue.index.client.zadd("delay_queue_job", {str(job.id): NOW})
    return job.id


def test_a_php_job_runs_its_mapped_handler_and_a_malformed_one_fails_alone(make_queue, log):
    queue = make_queue(php_classes={**CLASSES, "App\\Jobs\\Os": "os.path"})
    good = plant(queue, php_params("App\\Jobs\\Refund", "run", php_order(log, 42)))
    cut = plant(queue, php_params("App\\Jobs\\Refund", "run", php_order(log, 43))[:60])
    unmapped = plant(queue, php_params("App\\Jobs\\Sms", "run", php_order(log, 44)))
    outside = plant(queue, php_params("App\\Jobs\\Os", "join", php_order(log, 45)))

    report = queue.run(now=NOW)

    assert report.succeeded == 1 and report.failed == 3
    assert read_log(log) == ["refund " + json.dumps({"log": log, "order": 42}, sort_keys=True)]
    shown = queue.show(good)
    assert (shown["status"], shown["message"]) == ("success", "refunded 42")
    assert (shown["class"], shown["method"], shown["data"]) == (
        "App\\Jobs\\Refund",
        "run",
        {"log": log, "order": 42},
    )
    assert "bad params: malformed PHP serialize() text" in queue.show(cut)["message"]
    assert len(queue.history(cut)) == 1  # not retried: no retry can mend the text
    assert "map it in DELAYQ_PHP_CLASSES" in queue.show(unmapped)["message"]
    assert len(queue.history(unmapped)) == 2  # retried: mapping the class mends it
    assert "does not allow 'os.path'" in queue.show(outside)["message"]
    assert len(queue.history(outside)) == 1


def test_a_failed_php_job_is_retried_on_the_ladder_and_by_retry(make_queue, log):
    queue = make_queue(php_classes=CLASSES)
    job_id = plant(queue, php_params("App\\Jobs\\Refund", "fail", php_order(log, 7)))

    queue.run(now=NOW)
    attempts = queue.history(job_id)
    queue.run(now=NOW + 15)

    assert [row["status"] for row in attempts] == ["failed", "pending"]
    assert queue.show(job_id)["message"] == "ValueError: refund of 7 refused"
    second, third = queue.history(job_id)[1:]
    assert queue.cancel(third["id"], now=NOW + 20) == 1
    retried = queue.retry(second["id"], now=NOW + 100)
    queue.run(now=NOW + 100)
    assert queue.show(retried)["status"] == "failed"
    assert read_log(log) == ["fail 7", "fail 7", "fail 7"]


def test_list_finds_php_jobs_by_the_class_php_wrote(make_queue, log):
    queue = make_queue(php_classes=CLASSES)
    php_id = plant(queue, php_params("App\\Jobs\\Refund", "run", php_order(log, 1)))
    plant(queue, php_params("App\\Jobs\\RefundLater", "run", php_order(log, 2)))
    json_id = queue.add(REFUND, "run", {"log": log, "order": 3}, now=NOW)

    def listed(**fields) -> list[int]:
        return [row["id"] for row in queue.list_jobs(JobFilter(**fields), now=NOW)]

    assert listed(class_path="App\\Jobs\\Refund") == [php_id]
    assert listed(class_path=REFUND) == [json_id]
    assert listed(class_path="App\\Jobs\\Refund", statuses=(Status.SUCCESS,)) == []


def test_a_run_gives_a_php_producers_future_job_its_due_time_so_status_is_right(make_queue, log):
    queue = make_queue(php_classes=CLASSES)
    later = Job.create(
        params=php_params("App\\Jobs\\Refund", "run", php_order(log, 9)),
        status=Status.PENDING,
        created=datetime.fromtimestamp(NOW - 600, timezone.utc).replace(tzinfo=None),
    )
    queue.index.client.zadd("delay_queue_job", {str(later.id): NOW + 3600})
    assert queue.status(now=NOW).queues["default"].pending_due == 1  # due at `created`

    queue.run(now=NOW)

    assert Job.get_by_id(later.id).run_at == NOW + 3600
    stats = queue.status(now=NOW).queues["default"]
    assert (stats.pending_due, stats.oldest_due_id) == (0, None)
    assert read_log(log) == []
    queue.run(now=NOW + 3600)
    assert len(read_log(log)) == 1


def test_requeue_retries_failed_php_jobs_and_names_the_unmapped_ones(make_queue, log):
    queue = make_queue(php_classes=CLASSES)
    failed = Job.create(
        params=php_params("App\\Jobs\\Refund", "run", php_order(log, 1)), status=Status.FAILED
    )
    unmapped = Job.create(
        params=php_params("App\\Jobs\\Sms", "run", php_order(log, 2)), status=Status.FAILED
    )

    result = queue.requeue(JobFilter(statuses=(Status.FAILED,)), now=NOW)
    queue.run(now=NOW)

    assert [job_id for job_id, _ in result.skipped] == [unmapped.id]
    assert "map it in DELAYQ_PHP_CLASSES" in result.skipped[0][1]
    assert [row["status"] for row in queue.history(failed.id)] == ["failed", "success"]
    assert read_log(log) == ["refund " + json.dumps({"log": log, "order": 1}, sort_keys=True)]
