"""`delayq init` on the seed's own table: its exact DDL (MariaDB; the same shape on SQLite),
jobs written the way its PHP producers write them (INSERT, then ZADD delay_queue_job), and
its statuses. Due times come from the schedule, jobs it would never run become missed,
running rows come back, the columns get defaults, and a second init changes nothing."""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import redis

import delayq
from delayq.config import Settings
from delayq.errors import ConfigError
from delayq.store.table.schema import UNSCHEDULED
from tests.conftest import changes_made
from tests.sample_handlers.jobs import read_log
from tests.support.invoke import invoke

H = "tests.sample_handlers.jobs"
NOW = 1_800_000_000.0
SEED_MYSQL = """
CREATE TABLE `delay_queue` (
  `id` int(10) unsigned NOT NULL AUTO_INCREMENT,
  `params` varchar(512) DEFAULT NULL,
  `message` varchar(255) DEFAULT '',
  `ext_string` varchar(255) DEFAULT '',
  `retry_times` int(2) DEFAULT '0',
  `status` int(2) NOT NULL DEFAULT '1',
  `created` datetime DEFAULT NULL,
  `modified` datetime DEFAULT NULL,
  PRIMARY KEY (`id`),
  KEY `ext_idx` (`ext_string`)
) ENGINE=InnoDB DEFAULT CHARSET=utf8;
"""
SEED_SQLITE = [
    """CREATE TABLE delay_queue (
      id INTEGER PRIMARY KEY AUTOINCREMENT,
      params VARCHAR(512) DEFAULT NULL,
      message VARCHAR(255) DEFAULT '',
      ext_string VARCHAR(255) DEFAULT '',
      retry_times INT DEFAULT 0,
      status INT NOT NULL DEFAULT 1,
      created DATETIME DEFAULT NULL,
      modified DATETIME DEFAULT NULL
    )""",
    "CREATE INDEX ext_idx ON delay_queue (ext_string)",
]


class Seed:
    """The seed's table on one backend, written to as its producers and cron write."""

    def __init__(self, queue: delayq.Queue, log: str) -> None:
        self.queue = queue
        self.log = log
        self.mysql = queue.table.mysql
        self.redis: redis.Redis = queue.index.client
        for statement in [SEED_MYSQL] if self.mysql else SEED_SQLITE:
            queue.db.execute_sql(statement)

    def sql(self, statement: str, args: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
        if not self.mysql:
            statement = statement.replace("%s", "?")
        return list(self.queue.db.execute_sql(statement, args).fetchall())

    def add(self, n: str, due: float | None, status: int = 1, created: str | None = "x") -> int:
        """One seed job: INSERT with status 1 (or another), then ZADD its due time."""
        params = json.dumps({"class": H, "method": "record", "data": {"log": self.log, "n": n}})
        stamp = "2026-11-23 10:00:00" if created else None
        self.sql(
            "INSERT INTO delay_queue (params, ext_string, retry_times, status, created, modified)"
            " VALUES (%s, %s, 0, %s, %s, %s)",
            (params, f"order:{n}", status, stamp, stamp),
        )
        job_id = int(self.sql("SELECT MAX(id) FROM delay_queue")[0][0])
        if due is not None:
            self.redis.zadd("delay_queue_job", {str(job_id): due})
        return job_id

    def rows(self) -> list[tuple[Any, ...]]:
        return self.sql("SELECT * FROM delay_queue ORDER BY id")

    def schedule(self) -> list[tuple[bytes, float]]:
        return self.redis.zrange("delay_queue_job", 0, -1, withscores=True)

    def status(self, job_id: int) -> str:
        return self.queue.show(job_id)["status"]


@pytest.fixture
def seed(backend: dict[str, str], tmp_path: Path) -> Iterator[Seed]:
    settings = Settings(
        database_url=backend["database_url"],
        redis_url=backend["redis_url"],
        handlers=("tests.sample_handlers",),
        home=tmp_path / "home",
    )
    queue = delayq.connect(settings)
    yield Seed(queue, str(tmp_path / "handler.log"))
    queue.close()


@pytest.fixture
def seeded(seed: Seed) -> Callable[[], dict[str, int]]:
    """The seed's table with one job in each state a shop has, before init."""

    def fill() -> dict[str, int]:
        return {
            "later": seed.add("later", NOW + 3600),
            "due": seed.add("due", NOW - 60),
            "no-created": seed.add("no-created", NOW - 30, created=None),
            "done": seed.add("done", NOW - 500, status=10),
            "failed": seed.add("failed", NOW - 400, status=20),  # the seed leaves its id there
            "cancelled": seed.add("cancelled", None, status=30),
            "unscheduled": seed.add("unscheduled", None),
            "running": seed.add("running", NOW - 120, status=2),
        }

    return fill


def test_init_keeps_every_due_time_of_the_seeds_schedule(seed, seeded):
    ids = seeded()
    scores_before = {member: score for member, score in seed.schedule()}

    changes = seed.queue.init(now=NOW)

    assert "added column run_at" in changes
    assert "took the due times of 3 jobs from the schedule" in changes
    run_at = dict(seed.sql("SELECT id, run_at FROM delay_queue WHERE status = 1"))
    assert run_at[ids["later"]] == NOW + 3600
    assert run_at[ids["due"]] == NOW - 60
    assert run_at[ids["no-created"]] == NOW - 30
    after = dict(seed.schedule())
    for name in ("later", "due", "no-created"):
        assert after[str(ids[name]).encode()] == scores_before[str(ids[name]).encode()]

    report = seed.queue.run(now=NOW)

    assert sorted(read_log(seed.log)) == ["due", "no-created", "running"]
    assert report.succeeded == 3
    assert seed.status(ids["later"]) == "pending"
    seed.queue.run(now=NOW + 3600)
    assert sorted(read_log(seed.log)) == ["due", "later", "no-created", "running"]
    assert [seed.status(ids[name]) for name in ("done", "failed", "cancelled")] == [
        "success",
        "failed",
        "cancelled",
    ]


def test_a_waiting_seed_job_absent_from_the_schedule_becomes_missed_and_retry_runs_it(seed, seeded):
    ids = seeded()

    changes = seed.queue.init(now=NOW)
    seed.queue.run(now=NOW + 3600)

    assert "marked 1 waiting jobs missed: not on the schedule" in changes
    view = seed.queue.show(ids["unscheduled"])
    assert (view["status"], view["message"]) == ("missed", UNSCHEDULED)
    assert "unscheduled" not in read_log(seed.log)
    retry_id = seed.queue.retry(ids["unscheduled"], now=NOW + 3600)
    seed.queue.run(now=NOW + 3600)
    assert seed.status(retry_id) == "success"
    assert read_log(seed.log).count("unscheduled") == 1


def test_a_seed_row_left_running_goes_back_on_the_schedule_once(seed, seeded):
    ids = seeded()

    changes = seed.queue.init(now=NOW)

    assert "put 1 running jobs without a lease back on the schedule" in changes
    assert seed.sql(
        "SELECT status, run_at, lost_leases FROM delay_queue WHERE id = %s", (ids["running"],)
    ) == [(1, NOW, 1)]
    seed.queue.run(now=NOW)
    seed.queue.run(now=NOW + 5)
    assert read_log(seed.log).count("running") == 1
    assert seed.status(ids["running"]) == "success"


def test_after_init_add_run_cancel_and_retry_work_on_the_seeds_table(seed, seeded, tmp_path):
    seeded()
    seed.queue.init(now=NOW)
    big = {"log": seed.log, "n": "big", "text": "é😀" * 400}  # over the seed's 512 and utf8

    added = seed.queue.add(H, "record", big, delay=10, now=NOW)
    cancelled = seed.queue.add(H, "record", {"log": seed.log, "n": "c"}, ext="c", now=NOW)
    failing = seed.queue.add(H, "fail", {"log": seed.log, "n": "f"}, now=NOW)
    # A producer's INSERT that leaves out every column delayq added.
    seed.sql(
        "INSERT INTO delay_queue (params, ext_string) VALUES (%s, 'php')",
        (json.dumps({"class": H, "method": "record", "data": {"log": seed.log, "n": "php"}}),),
    )
    php_id = int(seed.sql("SELECT MAX(id) FROM delay_queue")[0][0])
    seed.redis.zadd("delay_queue_job", {str(php_id): NOW})
    assert seed.queue.cancel(ext="c", now=NOW) == 1
    seed.queue.run(now=NOW + 10)

    assert seed.queue.show(added)["data"]["text"] == "é😀" * 400
    assert seed.status(added) == "success"
    assert seed.status(cancelled) == "cancelled"
    assert seed.status(php_id) == "success"
    failed = seed.queue.show(failing)
    assert failed["status"] == "failed" and failed["message"] == "ValueError: boom f"
    retried = seed.queue.history(failing)[-1]
    assert (retried["status"], retried["retry_times"]) == ("pending", 1)
    log = read_log(seed.log)
    assert "big" in log and "php" in log and "c" not in log


def test_init_twice_changes_nothing_more(seed, seeded):
    seeded()
    seed.queue.init(now=NOW)
    rows, schedule = seed.rows(), seed.schedule()
    create = seed.sql("SHOW CREATE TABLE delay_queue") if seed.mysql else None

    assert changes_made(seed.queue.init(now=NOW + 50)) == []

    assert seed.rows() == rows
    assert seed.schedule() == schedule
    if seed.mysql:
        assert seed.sql("SHOW CREATE TABLE delay_queue") == create


def test_init_refuses_a_seed_table_whose_schedule_is_not_in_this_redis(seed):
    job_id = seed.add("lost", NOW + 60)
    seed.redis.delete("delay_queue_job")
    rows = seed.rows()

    with pytest.raises(ConfigError, match="point DELAYQ_REDIS_URL at the seed's Redis"):
        seed.queue.init(now=NOW)

    assert seed.rows() == rows
    assert "added column run_at" in seed.queue.init(schedule_lost=True, now=NOW)
    assert seed.status(job_id) == "missed"


# SQLite cannot add a NOT NULL column without a default: the case exists only on MySQL.
@pytest.mark.parametrize("backend", ["mariadb"], indirect=True)
def test_init_repairs_columns_an_earlier_upgrade_left_without_a_default(seed, seeded):
    seeded()
    seed.queue.init(now=NOW)
    seed.sql("ALTER TABLE delay_queue MODIFY `queue` varchar(64) NOT NULL")
    seed.sql("ALTER TABLE delay_queue MODIFY `lost_leases` int NOT NULL")

    changes = changes_made(seed.queue.init(now=NOW))

    assert changes == [
        "changed column queue to `queue` VARCHAR(64) NOT NULL DEFAULT 'default'",
        "changed column lost_leases to `lost_leases` INTEGER NOT NULL DEFAULT 0",
    ]
    assert seed.queue.add(H, "echo", 1, now=NOW) > 0


def test_delayq_init_prints_each_change_and_refuses_without_the_schedule(seed, cli_env):
    job_id = seed.add("lost", NOW + 60)
    seed.redis.delete("delay_queue_job")

    refused = invoke(cli_env, "init")

    assert (refused.exit_code, refused.stdout) == (2, "")
    assert refused.stderr.startswith("delayq: error: delay_queue holds 1 waiting jobs")
    assert len(refused.stderr.splitlines()) == 1
    seed.redis.zadd("delay_queue_job", {str(job_id): NOW + 60})
    done = invoke(cli_env, "init")
    assert done.exit_code == 0, done.stderr
    lines = done.stdout.splitlines()
    assert (
        "added column run_at" in lines and "took the due times of 1 jobs from the schedule" in lines
    )
    assert lines[-1].startswith("initialised database ")
    assert seed.sql("SELECT run_at FROM delay_queue") == [(NOW + 60,)]


def doctor_levels(cli_env: dict[str, str]) -> tuple[int, dict[str, str]]:
    result = invoke(cli_env, "doctor")
    found = {}
    for text in result.stdout.splitlines():
        level, name, detail = text.split(None, 2)
        found[name] = f"{level} {detail}" if level != "ok" else "ok"
    return result.exit_code, found


def test_doctor_fails_on_columns_that_break_adds_and_passes_after_init(seed, seeded, cli_env):
    seeded()
    seed.queue.init(now=NOW)
    code, checks = doctor_levels(cli_env)
    assert (code, checks["columns"], checks["schedule"]) == (0, "ok", "ok")
    if not seed.mysql:
        return
    seed.sql("ALTER TABLE delay_queue MODIFY `queue` varchar(64) NOT NULL")
    seed.sql("ALTER TABLE delay_queue MODIFY `params` varchar(512) NOT NULL")
    seed.sql("ALTER TABLE delay_queue CONVERT TO CHARACTER SET utf8")

    code, checks = doctor_levels(cli_env)

    assert code == 1
    assert checks["columns"].startswith("FAIL delay_queue: params is varchar, too short")
    assert "queue has no DEFAULT, so an INSERT that leaves it out fails" in checks["columns"]
    assert "which refuses 4-byte UTF-8 such as emoji" in checks["columns"]
    assert checks["columns"].endswith("run `delayq init`")
    seed.queue.init(now=NOW)
    assert doctor_levels(cli_env)[1]["columns"] == "ok"


def test_delayq_init_schedule_lost_upgrades_and_marks_the_waiting_jobs_missed(seed, cli_env):
    job_id = seed.add("lost", None)

    done = invoke(cli_env, "init", "--schedule-lost")

    assert done.exit_code == 0, done.stderr
    assert "marked 1 waiting jobs missed: not on the schedule" in done.stdout.splitlines()
    assert seed.status(job_id) == "missed"
    assert changes_made(invoke(cli_env, "init").stdout.splitlines()[:-1]) == []
