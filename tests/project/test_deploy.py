"""The deployment examples still say what they mean: crontab.example's lines parse with a
real cron parser and fire every minute, the systemd units pass `systemd-analyze verify`
(only that check is skipped where systemd-analyze is absent), and the per-queue template's
command line, run as written, serves its queue and stops on SIGTERM as systemd expects."""

from __future__ import annotations

import re
import shlex
import shutil
import signal
import subprocess
import sys
from datetime import datetime
from pathlib import Path

import pytest
from croniter import croniter

from delayq.base.durations import parse_duration
from delayq.config import DEFAULTS
from tests.faults.test_processes import start
from tests.sample_handlers.jobs import read_log
from tests.support.waiting import wait_for

ROOT = Path(__file__).resolve().parents[2]
CRONTAB = ROOT / "crontab.example"
CONTRIB = ROOT / "contrib"
TEMPLATE = CONTRIB / "delayq@.service"
ENV_LINE = re.compile(r"^[A-Z_][A-Z0-9_]*=\S*$")


def cron_jobs(*, commented: bool) -> list[tuple[str, str]]:
    """(schedule, command) of each job line; `commented` picks the `# * * * * ...` ones."""
    jobs = []
    for raw in CRONTAB.read_text().splitlines():
        line = raw.strip()
        if commented:
            if not line.startswith("#"):
                continue
            line = line.lstrip("#").strip()
        elif not line or line.startswith("#") or ENV_LINE.match(line):
            continue
        fields = line.split(None, 5)
        if len(fields) == 6 and croniter.is_valid(" ".join(fields[:5])):
            jobs.append((" ".join(fields[:5]), fields[5]))
        elif not commented:
            pytest.fail(f"crontab.example line is neither a job nor NAME=value: {raw!r}")
    return jobs


def test_every_active_crontab_line_is_a_variable_or_a_job_that_runs_each_minute():
    jobs = cron_jobs(commented=False)

    assert [command for _, command in jobs] == [
        "cd /opt/app && delayq run >>/var/log/delayq.log 2>&1"
    ]
    for schedule, _ in jobs:
        fires = croniter(schedule, datetime(2026, 1, 1, 12, 0, 30))
        first, second = fires.get_next(datetime), fires.get_next(datetime)
        assert (second - first).total_seconds() == 60


def test_the_commented_alternative_is_a_valid_job_too():
    (alternative,) = cron_jobs(commented=True)

    assert croniter.is_valid(alternative[0])
    assert "./loop.sh 5" in alternative[1]
    assert (ROOT / "loop.sh").stat().st_mode & 0o111


def test_crontab_names_only_settings_delayq_reads():
    names = [line.split("=", 1)[0] for line in CRONTAB.read_text().splitlines()]
    delayq_names = [name for name in names if name.startswith("DELAYQ_")]
    assert delayq_names
    assert {name.removeprefix("DELAYQ_").lower() for name in delayq_names} <= set(DEFAULTS)


def unit(path: Path) -> dict[str, dict[str, list[str]]]:
    """A unit file as {section: {key: [values]}} (keys may repeat in systemd units)."""
    sections: dict[str, dict[str, list[str]]] = {}
    current: dict[str, list[str]] = {}
    for raw in path.read_text().splitlines():
        line = raw.strip()
        if not line or line.startswith(("#", ";")):
            continue
        if line.startswith("["):
            current = sections.setdefault(line.strip("[]"), {})
            continue
        key, value = line.split("=", 1)
        current.setdefault(key.strip(), []).append(value.strip())
    return sections


def test_service_is_a_oneshot_delayq_run_and_the_timer_starts_it_each_minute():
    service = unit(CONTRIB / "delayq.service")["Service"]
    timer = unit(CONTRIB / "delayq.timer")

    assert service["Type"] == ["oneshot"]
    (command,) = service["ExecStart"]
    assert command.split()[1:3] == ["run", "--metrics-file"]
    assert timer["Timer"]["Unit"] == ["delayq.service"]
    assert timer["Timer"]["OnCalendar"] == ["*-*-* *:*:00"]
    assert timer["Install"]["WantedBy"] == ["timers.target"]


SYSTEMD_ANALYZE = shutil.which("systemd-analyze")
needs_systemd_analyze = pytest.mark.skipif(
    SYSTEMD_ANALYZE is None, reason="systemd-analyze is not installed here"
)


def test_the_template_runs_one_loop_per_queue_and_outlasts_the_grace_on_stop():
    service = unit(TEMPLATE)["Service"]

    (command,) = service["ExecStart"]
    assert command.split()[1:] == ["run", "--loop", "--queue", "%i"]
    assert service["Restart"] == ["always"]
    assert (service["KillSignal"], service["KillMode"]) == (["SIGTERM"], ["mixed"])
    (stop_timeout,) = service["TimeoutStopSec"]
    assert parse_duration(stop_timeout, "TimeoutStopSec") > DEFAULTS["grace"] + 5
    assert service["SuccessExitStatus"] == [str(128 + signal.SIGTERM)]
    assert unit(TEMPLATE)["Install"]["WantedBy"] == ["multi-user.target"]


def test_the_templates_command_serves_its_queue_alone_and_exits_as_systemd_expects(
    queue, cli_env, log
):
    service = unit(TEMPLATE)["Service"]
    (command,) = service["ExecStart"]
    other = queue.add("tests.sample_handlers.jobs", "record", {"log": log, "n": "other"})
    worker = start(cli_env, *shlex.split(command.replace("%i", "sms"))[1:])
    job_id = queue.add("tests.sample_handlers.jobs", "record", {"log": log, "n": 1}, queue="sms")

    wait_for(lambda: queue.show(job_id)["status"] == "success", 60, "the sms job to run")
    worker.send_signal(signal.SIGTERM)
    (stop_timeout,) = service["TimeoutStopSec"]
    _, stderr = worker.communicate(timeout=parse_duration(stop_timeout, "TimeoutStopSec"))

    assert str(worker.returncode) in service["SuccessExitStatus"], stderr
    (line,) = stderr.decode().splitlines()  # the stop, logged once; nothing else
    # " within 25s" when the signal lands while a pass is under way (a loaded machine).
    assert re.search(
        r"received SIGTERM: finishing the current job( within \d+s)?, handing the rest back$", line
    ), line
    assert read_log(log) == ["1"]
    assert queue.show(other)["status"] == "pending"


def verify_copies(tmp_path: Path, *names: str) -> None:
    """Paths of the units, copied with the example's install path pointed at this checkout:
    verify checks that ExecStart exists."""
    delayq = Path(sys.executable).with_name("delayq")
    for name in names:
        text = (CONTRIB / name).read_text()
        text = text.replace("/opt/app/.venv/bin/delayq", str(delayq)).replace("/opt/app", str(ROOT))
        (tmp_path / name).write_text(text)


@needs_systemd_analyze
@pytest.mark.parametrize(
    ("names", "verified"),
    [
        (("delayq.service", "delayq.timer"), ("delayq.service", "delayq.timer")),
        (("delayq@.service",), ("delayq@default.service", "delayq@sms.service")),
    ],
    ids=["timer", "template"],
)
def test_units_pass_systemd_analyze_verify(tmp_path, names, verified):
    verify_copies(tmp_path, *names)

    result = subprocess.run(
        [SYSTEMD_ANALYZE, "verify", *(str(tmp_path / name) for name in verified)],
        capture_output=True,
        text=True,
        check=False,
    )

    assert result.returncode == 0, result.stderr
    assert "delayq" not in result.stderr, result.stderr


@needs_systemd_analyze
def test_timer_calendar_elapses_once_a_minute():
    result = subprocess.run(
        [SYSTEMD_ANALYZE, "calendar", "--iterations=3", "*-*-* *:*:00"],
        capture_output=True,
        text=True,
        check=True,
    )
    stamps = re.findall(r"(?:Next elapse|Iter\. #\d):\s+\w+ (\S+ \S+)", result.stdout)
    times = [datetime.fromisoformat(stamp) for stamp in stamps]

    assert len(times) == 3
    gaps = {
        (later - earlier).total_seconds() for earlier, later in zip(times, times[1:], strict=False)
    }
    assert gaps == {60}


def test_loop_sh_refuses_a_bad_step():
    for step in ("0", "61", "abc"):
        result = subprocess.run(
            ["bash", str(ROOT / "loop.sh"), step], capture_output=True, text=True, timeout=10
        )
        assert result.returncode == 2
        assert result.stderr.startswith("usage: loop.sh STEP")


def test_loop_sh_with_a_sixty_second_step_runs_once_and_exits(queue, cli_env, tmp_path):
    job_id = queue.add("tests.sample_handlers.jobs", "echo", "hi")
    wrapper = tmp_path / "delayq"
    wrapper.write_text(f'#!/bin/sh\nexec {sys.executable} -m delayq "$@"\n')
    wrapper.chmod(0o755)

    result = subprocess.run(
        ["bash", str(ROOT / "loop.sh"), "60"],
        env={**cli_env, "DELAYQ": str(wrapper)},
        capture_output=True,
        text=True,
        timeout=90,
    )

    assert (result.returncode, result.stdout, result.stderr) == (0, "", "")
    assert queue.show(job_id)["status"] == "success"
