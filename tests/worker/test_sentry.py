"""Failed attempts reported to Sentry with the SDK's own client and a Transport that keeps
the envelopes (the DSN points at 127.0.0.1; nothing is sent); a DSN without sentry-sdk
installed stops `run` before it runs anything."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from delayq.store.table.model import Job, Status
from delayq.worker.hooks import load_sentry
from tests.faults.test_processes import delayq
from tests.sample_handlers.jobs import read_log

sentry_sdk = pytest.importorskip("sentry_sdk")
from sentry_sdk.scope import Scope  # noqa: E402
from sentry_sdk.transport import Transport  # noqa: E402 - only with sentry-sdk installed

H = "tests.sample_handlers.jobs"
DSN = "http://public@127.0.0.1:9/1"


class Kept(Transport):
    """The envelopes the client would have sent."""

    def __init__(self, options: Any) -> None:
        super().__init__(options)
        self.envelopes: list[Any] = []

    def capture_envelope(self, envelope: Any) -> None:
        self.envelopes.append(envelope)

    def events(self) -> list[dict[str, Any]]:
        return [envelope.get_event() for envelope in self.envelopes if envelope.get_event()]


@pytest.fixture
def kept(queue) -> Iterator[Kept]:
    """delayq's own Sentry client, its transport swapped for one that keeps envelopes."""
    load_sentry(queue.settings.with_overrides(sentry_dsn=DSN))
    client = sentry_sdk.get_client()
    transport = Kept(client.options)
    client.transport = transport
    yield transport
    client.close()
    Scope.get_global_scope().set_client(None)  # sentry_sdk.get_global_scope() only from 2.1


def test_each_failure_is_sent_with_the_jobs_tags_and_without_its_data(make_queue, kept, log):
    queue = make_queue(sentry_dsn=DSN)
    retried = queue.add(H, "fail", {"log": log, "n": "secret-card-4242"}, ext="order:7")
    terminal = queue.add(H, "fail_for_good", {"log": log}, queue="mail")
    queue.add(H, "record", {"log": log, "n": 1})

    queue.run()

    events = {event["tags"]["delayq.job_id"]: event for event in kept.events()}
    assert set(events) == {retried, terminal}
    first = events[retried]
    assert {key: value for key, value in first["tags"].items() if key != "delayq.job_id"} == {
        "delayq.class": H,
        "delayq.method": "fail",
        "delayq.queue": "default",
        "delayq.ext": "order:7",
        "delayq.terminal": False,
    }
    (exception,) = first["exception"]["values"]
    assert (exception["type"], exception["value"]) == ("ValueError", "boom secret-card-4242")
    frames = exception["stacktrace"]["frames"]
    assert frames[-1]["function"] == "fail"
    assert all("vars" not in frame for frame in frames), "locals would carry the job's data"
    assert "secret-card-4242" not in repr(first.get("extra", {})) + repr(first.get("contexts"))
    assert events[terminal]["tags"]["delayq.terminal"] is True
    assert events[terminal]["tags"]["delayq.queue"] == "mail"
    assert Job.get_by_id(retried).status == Status.FAILED


def test_exceptions_that_resist_printing_do_not_stop_the_run(make_queue, kept, log):
    queue = make_queue(sentry_dsn=DSN)
    ids = [
        queue.add("tests.sample_handlers.hostile", "raise_", {"log": log, "raise": raised})
        for raised in ("Unprintable", "SlyText", "surrogate")
    ]
    after = queue.add(H, "record", {"log": log, "n": "after"})

    report = queue.run()

    assert (report.failed, report.succeeded) == (3, 1)
    assert [Job.get_by_id(job_id).status for job_id in ids] == [Status.FAILED] * 3
    assert Job.get_by_id(after).status == Status.SUCCESS
    events = kept.events()
    assert sorted(event["tags"]["delayq.job_id"] for event in events if "tags" in event) == ids[1:]
    # The one sentry-sdk could not send is logged, and that error record reaches Sentry too.
    (logged,) = [event["logentry"]["formatted"] for event in events if "tags" not in event]
    assert logged == f"could not report job {ids[0]} to Sentry: Unraisable: no text either"


def test_a_dsn_without_sentry_sdk_is_one_line_exit_2_and_nothing_runs(
    queue, cli_env, log, tmp_path: Path
):
    missing = tmp_path / "no_sentry" / "sentry_sdk"
    missing.mkdir(parents=True)
    (missing / "__init__.py").write_text('raise ImportError("sentry_sdk is not installed")\n')
    job_id = queue.add(H, "fail", {"log": log})
    path = os.pathsep.join([str(missing.parent), cli_env["PYTHONPATH"]])

    completed = delayq(cli_env, "run", DELAYQ_SENTRY_DSN=DSN, PYTHONPATH=path)

    assert completed.returncode == 2
    assert completed.stderr.decode().splitlines() == [
        "delayq: error: DELAYQ_SENTRY_DSN is set but sentry-sdk is not installed; "
        "pip install 'delayq[sentry]' or unset it"
    ]
    assert Job.get_by_id(job_id).status == Status.PENDING
    assert read_log(log) == []


def test_a_malformed_dsn_is_one_line_exit_2(queue, cli_env, log):
    job_id = queue.add(H, "fail", {"log": log})

    completed = delayq(cli_env, "run", DELAYQ_SENTRY_DSN="not a dsn\x1b")

    assert completed.returncode == 2
    (line,) = completed.stderr.decode().splitlines()
    assert line.startswith("delayq: error: DELAYQ_SENTRY_DSN is not a valid Sentry DSN")
    assert Job.get_by_id(job_id).status == Status.PENDING
