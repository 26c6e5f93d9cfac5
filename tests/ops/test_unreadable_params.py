"""Rows whose params another producer wrote wrong: `list`, `show` and `peek` call what they
cannot read `(unreadable)` (never `None.None`), and a row without `data`, which
docs/producers.md requires, fails as bad params instead of calling its handler with None."""

from __future__ import annotations

import json
import time

import pytest

from delayq.store.table.model import Job, Status
from tests.support.invoke import invoke

UNREADABLE = "(unreadable)"  # store/table/params.py's, spelled out: the word is the contract

NOW = 1_800_000_000.0
H = "tests.sample_handlers.jobs"


def planted(queue, params: str, **fields) -> int:
    """A pending row with these params, scheduled now, as a producer of its own writes it."""
    row = Job.create(params=params, run_at=NOW, status=Status.PENDING, **fields)
    queue.index.schedule.add("default", row.id, NOW)
    return row.id


@pytest.mark.parametrize(
    "params", ["not json at all", '["a list"]', '{"method": "record", "data": null}']
)
def test_list_shows_a_call_it_cannot_read_as_one_word(queue, cli_env, params):
    planted(queue, params, ext_string="odd")

    result = invoke(cli_env, "list")

    assert result.exit_code == 0, result.output
    (row,) = [line for line in result.stdout.splitlines() if " odd " in line]
    assert UNREADABLE in row
    assert "None" not in row


def test_show_names_neither_class_nor_method_none(queue, cli_env):
    job_id = planted(queue, "not json at all")

    result = invoke(cli_env, "show", str(job_id))

    assert result.exit_code == 0, result.output
    lines = result.stdout.splitlines()
    assert f"class       {UNREADABLE}" in lines
    assert f"method      {UNREADABLE}" in lines


def test_peek_shows_a_call_it_cannot_read_as_one_word(queue, cli_env):
    planted(queue, "not json at all")

    result = invoke(cli_env, "peek")

    assert result.exit_code == 0, result.output
    (row,) = result.stdout.splitlines()[1:]
    assert UNREADABLE in row and "None" not in row


def test_json_keeps_null_for_what_cannot_be_read(queue, cli_env):
    job_id = planted(queue, "not json at all")

    view = json.loads(invoke(cli_env, "show", str(job_id), "--json").stdout)

    assert (view["class"], view["method"]) == (None, None)


def test_a_row_without_data_fails_as_bad_params_and_its_handler_is_not_called(queue):
    job_id = planted(queue, json.dumps({"class": H, "method": "echo"}))

    report = queue.run(now=NOW)

    view = queue.show(job_id)
    assert (view["status"], report.succeeded, report.retried) == ("failed", 0, 0)
    assert view["message"] == 'bad params: no "data"; write "data": null for a call without any'


def test_data_null_is_data(queue):
    job_id = planted(queue, json.dumps({"class": H, "method": "echo", "data": None}))

    report = queue.run(now=NOW)

    assert (report.succeeded, queue.show(job_id)["status"]) == (1, "success")


def test_run_v_calls_a_row_it_cannot_read_by_the_same_word(queue, cli_env):
    due = time.time() - 1
    job_id = Job.create(params="not json at all", run_at=due, status=Status.PENDING).id
    queue.index.schedule.add("default", job_id, due)

    result = invoke(cli_env, "run", "-v")

    assert result.exit_code == 0, result.output
    line = next(line for line in result.stdout.splitlines() if line.startswith(f"{job_id} "))
    assert line.startswith(f"{job_id} {UNREADABLE} attempt 0 failed"), line
    assert "?" not in line.split(" attempt")[0]
