"""A job whose handler is refused (outside the allowlist, not importable, params naming a
class but no method) is named as its row names it — in `run -v`, in `--log-json` lines and
in the metrics label — since that name is what the operator has to fix."""

from __future__ import annotations

import json
import time

import pytest

from delayq.store.index.tallies import label
from delayq.store.table.model import Job
from tests.ops.test_metrics import parse
from tests.support.invoke import invoke

MISSING = "tests.sample_handlers.no_such_module"


def plant(queue, params: dict[str, object]) -> int:
    """A due row written as another producer would, past the checks `add` makes."""
    now = time.time() - 1
    job_id = Job.create(params=json.dumps(params), run_at=now).id
    queue.index.schedule.add("default", job_id, now)
    return job_id


@pytest.mark.parametrize(
    ("params", "name"),
    [
        ({"class": "billing.jobs", "method": "refund", "data": {}}, "billing.jobs.refund"),
        ({"class": MISSING, "method": "send", "data": {}}, f"{MISSING}.send"),
        (
            {"class": "tests.sample_handlers.jobs", "data": {}},
            "tests.sample_handlers.jobs.(unreadable)",  # a method the params do not name
        ),
    ],
)
def test_a_refused_handler_is_named_in_verbose_output_logs_and_metrics(
    queue, cli_env, tmp_path, params, name
):
    job_id = plant(queue, params)
    path = tmp_path / "delayq.jsonl"

    result = invoke(cli_env, "run", "-v", "--log-file", str(path), "--log-json")

    assert result.exit_code == 0, result.output
    assert f"\n{job_id} {name} attempt 0 failed" in f"\n{result.stdout}"
    (entry,) = [json.loads(text) for text in path.read_text().splitlines() if "job_id" in text]
    assert f"{entry['class']}.{entry['method']}" == name
    found, _ = parse(invoke(cli_env, "metrics").stdout)
    labels = (("handler", label(name)), ("queue", "default"))
    assert found[("delayq_jobs_failed_total", labels)] == 1


def test_a_refused_name_with_control_characters_is_escaped(queue, cli_env):
    job_id = plant(queue, {"class": "billing\njobs", "method": "re\x1bfund", "data": {}})

    result = invoke(cli_env, "run", "-v")

    assert result.exit_code == 0, result.output
    assert f"\n{job_id} billing\\njobs.re\\x1bfund attempt 0 failed" in f"\n{result.stdout}"
    found, _ = parse(invoke(cli_env, "metrics").stdout)
    labels = (("handler", label("billing\njobs.re\x1bfund")), ("queue", "default"))
    assert found[("delayq_jobs_failed_total", labels)] == 1
