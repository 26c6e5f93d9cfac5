"""Which handler the metrics count a job under, wherever the count is made: a call, a dead run's
job put back, recorded from its journal or failed as a poison job, a job missed. A PHP
producer's job counts under the Python handler DELAYQ_PHP_CLASSES maps its class to, as its
call does; a row whose params name no handler under `?`."""

from __future__ import annotations

import json
import time

from prometheus_client.parser import text_string_to_metric_families

from delayq.ops.metrics import exposition
from delayq.store.table.leases import Leases
from delayq.store.table.model import Job, Status
from delayq.worker.handlers import UNNAMED, handler_of
from delayq.worker.retry import MAX_LOST_LEASES
from tests.store.table.test_php_params import CLASSES, REFUND, php_order, php_params

REFUND_RUN = (("handler", f"{REFUND}.run"), ("queue", "default"))
NO_HANDLER = (("handler", "(unreadable)"), ("queue", "default"))


def counted(queue, now: float) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    text = exposition(queue.table, queue.index, now).decode()
    return {
        (sample.name, tuple(sorted(sample.labels.items()))): sample.value
        for family in text_string_to_metric_families(text)
        for sample in family.samples
    }


def planted(queue, params: str, due: float) -> int:
    """A row as the seed's producers write it: params, status 1, then ZADD."""
    job = Job.create(params=params, status=Status.PENDING, run_at=due)
    queue.index.client.zadd("delay_queue_job", {str(job.id): due})
    return job.id


def died_under(queue, job_id: int, now: float) -> None:
    """The job was running when its run died: its lease lapsed a minute ago."""
    Leases(queue.table).mark_running([job_id], "dead-run", now - 60, now - 120)
    queue.index.schedule.remove("default", [job_id])


def test_handler_of_maps_php_classes_and_names_what_it_can_of_a_row_it_cannot_call():
    refund = php_params("App\\Jobs\\Refund", "run", "N;")
    assert handler_of(refund, CLASSES) == (REFUND, "run")
    # Unmapped: named as the row names it, what the operator must map.
    assert handler_of(refund, {}) == ("App\\Jobs\\Refund", "run")
    assert handler_of('{"class": "a.B", "method": 3}', {}) == ("a.B", UNNAMED)
    assert handler_of("not json", CLASSES) == (UNNAMED, UNNAMED)


def test_a_php_job_whose_run_died_counts_under_its_mapped_handler(make_queue, log):
    queue = make_queue(php_classes=CLASSES)
    now = time.time()
    job_id = planted(queue, php_params("App\\Jobs\\Refund", "run", php_order(log, 1)), now - 200)
    died_under(queue, job_id, now)

    report = queue.run(now=now)

    assert (report.recovered, report.succeeded) == (1, 1)
    found = counted(queue, now)
    assert found[("delayq_jobs_recovered_total", REFUND_RUN)] == 1
    assert found[("delayq_jobs_succeeded_total", REFUND_RUN)] == 1
    assert ("delayq_jobs_recovered_total", NO_HANDLER) not in found


def test_a_php_poison_job_counts_under_its_mapped_handler(make_queue, log):
    queue = make_queue(php_classes=CLASSES)
    now = time.time()
    job_id = planted(queue, php_params("App\\Jobs\\Refund", "run", php_order(log, 2)), now - 200)
    died_under(queue, job_id, now)
    Job.update(lost_leases=MAX_LOST_LEASES - 1).where(Job.id == job_id).execute()

    report = queue.run(now=now)

    assert report.failed == 1 and Job.get_by_id(job_id).status == Status.FAILED
    found = counted(queue, now)
    assert found[("delayq_jobs_poisoned_total", REFUND_RUN)] == 1
    assert found[("delayq_jobs_failed_total", REFUND_RUN)] == 1


def test_a_php_jobs_outcome_from_a_dead_runs_journal_counts_under_its_mapped_handler(
    make_queue, log
):
    queue = make_queue(php_classes=CLASSES)
    now = time.time()
    job_id = planted(queue, php_params("App\\Jobs\\Refund", "run", php_order(log, 3)), now - 200)
    died_under(queue, job_id, now)
    record = json.dumps([int(Status.SUCCESS), "refunded 3", None, now - 100])
    queue.index.journal.write_many("default", [(job_id, record)])

    report = queue.run(now=now)

    assert report.recovered == 1 and Job.get_by_id(job_id).status == Status.SUCCESS
    assert counted(queue, now)[("delayq_jobs_succeeded_total", REFUND_RUN)] == 1


def test_a_missed_php_job_counts_under_its_mapped_handler(make_queue, log):
    queue = make_queue(php_classes=CLASSES)
    now = time.time()
    due = now - queue.settings.since - 60
    job_id = planted(queue, php_params("App\\Jobs\\Refund", "run", php_order(log, 4)), due)

    queue.run(now=now)

    assert Job.get_by_id(job_id).status == Status.MISSED
    found = counted(queue, now)
    assert found[("delayq_jobs_missed_total", REFUND_RUN)] == 1
    assert ("delayq_jobs_missed_total", NO_HANDLER) not in found


def test_a_row_naming_no_handler_counts_under_a_question_mark_missed_or_failed(queue):
    now = time.time()
    missed = planted(queue, "not json", now - queue.settings.since - 60)
    failed = planted(queue, "not json either", now - 10)

    queue.run(now=now)

    assert Job.get_by_id(missed).status == Status.MISSED
    assert Job.get_by_id(failed).status == Status.FAILED
    found = counted(queue, now)
    assert found[("delayq_jobs_missed_total", NO_HANDLER)] == 1
    assert found[("delayq_jobs_failed_total", NO_HANDLER)] == 1
