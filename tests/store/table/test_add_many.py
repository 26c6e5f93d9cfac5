"""`add_many`: one transaction of multi-row INSERTs, the ids in the order of the specs, and
every value stored exactly as given, whatever characters it holds."""

from __future__ import annotations

import time

import pytest

import delayq
from delayq.store.table import inserts
from delayq.store.table.model import Job

H = "tests.sample_handlers.jobs"
NOW = 1_800_000_000.0
AWKWARD = ["%s", "%%", "%(x)s", "it's", 'say "hi"', "back\\slash", "naïve ☃", "", "a\nb", "`x`"]


def test_ids_come_back_in_the_order_of_the_specs(queue):
    # More than one chunk: the later ones are built while the earlier ones are written.
    count = 2 * inserts.INSERT_CHUNK + 500
    specs = [delayq.JobSpec(H, "echo", {"n": n}, delay=n % 7) for n in range(count)]

    ids = queue.add_many(specs, now=time.time())  # all due within the horizon

    assert len(set(ids)) == count
    stored = dict(Job.select(Job.id, Job.params).tuples())
    assert [queue.show(job_id)["data"] for job_id in ids[:5]] == [{"n": n} for n in range(5)]
    for n, job_id in enumerate(ids):
        assert f'"n": {n}}}' in stored[job_id]
    assert queue.index.schedule.size("default") == count


def test_values_are_stored_as_given_whatever_characters_they_hold(queue):
    # Constant columns are escaped once per chunk and the rest per row: mix both.
    specs = [delayq.JobSpec(H, "echo", {"text": text}, delay=1, ext=text) for text in AWKWARD]
    specs += [delayq.JobSpec(H, "echo", {"text": "%s"}, delay=1, ext="%(x)s")] * 3

    ids = queue.add_many(specs, now=NOW)

    for spec, job_id in zip(specs, ids, strict=True):
        view = queue.show(job_id)
        assert (view["ext"], view["data"]) == (spec.ext, spec.data)
        assert view["run_at"] == NOW + 1


def test_a_chunk_with_one_ext_for_every_row_stores_it_everywhere(queue):
    ids = queue.add_many([delayq.JobSpec(H, "echo", n, ext="50% off 'today'") for n in range(3)])

    assert {queue.show(job_id)["ext"] for job_id in ids} == {"50% off 'today'"}
    assert queue.cancel(ext="50% off 'today'") == 3


@pytest.mark.parametrize("backend", ["mariadb"], indirect=True)
def test_mariadb_by_default_gives_a_statement_consecutive_ids(queue, backend):
    # What lets add_many skip RETURNING: the server's documented auto-increment behaviour.
    assert queue.table.consecutive_ids


def test_many_large_payloads_are_split_into_statements_the_server_accepts(queue):
    # 300 payloads of 60 KB: 18 MB, more than one statement may carry (16 MiB by default).
    big = "x" * 60_000
    specs = [delayq.JobSpec(H, "echo", {"n": n, "pad": big}, delay=60) for n in range(300)]

    ids = queue.add_many(specs, now=NOW)

    assert len(ids) == 300 == Job.select().count()
    assert queue.show(ids[-1])["data"] == {"n": 299, "pad": big}


def test_more_rows_than_sqlite_binds_in_one_statement(queue):
    ids = queue.add_many([delayq.JobSpec(H, "echo", n, delay=60) for n in range(7000)], now=NOW)

    assert ids == sorted(ids) and len(set(ids)) == 7000
    assert queue.show(ids[6999])["data"] == 6999


def test_a_bad_spec_in_a_later_chunk_leaves_nothing_written(queue):
    specs = [delayq.JobSpec(H, "echo", n, delay=60) for n in range(2 * inserts.INSERT_CHUNK)]
    specs[-3] = delayq.JobSpec(H, "echo", {"not json": object()}, delay=60)

    with pytest.raises(delayq.BadInput, match="not JSON-serialisable"):
        queue.add_many(specs, now=NOW)

    assert Job.select().count() == 0
    assert queue.index.schedule.size("default") == 0


def test_columns_left_at_their_default_read_back_as_it_next_to_rows_that_set_them(queue):
    # Defaults shared by a whole chunk are left to the table; one row setting each column
    # keeps it in a statement of its own chunk.
    plain = [delayq.JobSpec(H, "echo", n, delay=60) for n in range(3)]
    other = delayq.JobSpec(H, "echo", 9, delay=60, ext="k", queue="mail", timeout=5, every=3600)

    plain_ids = queue.add_many(plain, now=NOW)
    mixed_ids = queue.add_many([*plain, other], now=NOW)

    for job_id in plain_ids + mixed_ids[:3]:
        row = Job.get_by_id(job_id)
        assert (row.status, row.retry_times, row.queue, row.ext_string) == (1, 0, "default", "")
        assert (row.timeout, row.every, row.chain_id, row.lost_leases) == (None, None, None, 0)
    row = Job.get_by_id(mixed_ids[3])
    assert (row.queue, row.ext_string, row.timeout, row.every) == ("mail", "k", 5.0, 3600.0)


def test_without_consecutive_ids_or_returning_each_row_is_a_statement(queue, monkeypatch):
    # MySQL with innodb_autoinc_lock_mode 2 promises neither: ids are read a row at a time.
    monkeypatch.setattr(queue.table, "consecutive_ids", False)
    monkeypatch.setattr(queue.table, "returning", False)

    ids = queue.add_many([delayq.JobSpec(H, "echo", n, delay=60) for n in range(5)], now=NOW)

    assert [queue.show(job_id)["data"] for job_id in ids] == list(range(5))
