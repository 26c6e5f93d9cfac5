"""A real PHP producer (tests/php/producer.php: PDO MySQL and phpredis, written the way the
seed's addDelayQueue is) writes jobs into the seed's table before and after `delayq init`,
and cancels one the seed's way; `delayq run`, a separate process, runs them, and the
handler's own log shows the PHP data arrived whole. The PHP and Node samples of
docs/producers.md write jobs into delayq's own table that a run then runs. MariaDB only: the
seed is a MySQL shop.

Under CI=true a missing php (or its redis / pdo_mysql extension) or node fails; elsewhere
it skips.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import pytest
import redis

from tests.conftest import DELAYQ, HANDLERS, IN_CI, ROOT, mysql_connect
from tests.sample_handlers.jobs import read_log
from tests.store.table.test_seed_upgrade import SEED_MYSQL

PRODUCER = ROOT / "tests" / "php" / "producer.php"
PHP_CLASSES = "App\\Jobs\\Refund=tests.sample_handlers.php_shop.Refund"


def php_or_fail_in_ci() -> str:
    """The php binary, with the extensions the producer needs."""
    php = shutil.which("php")
    missing = "php" if php is None else None
    if php is not None:
        modules = subprocess.run([php, "-m"], capture_output=True, text=True).stdout.split()
        lacking = [name for name in ("redis", "pdo_mysql") if name not in modules]
        missing = f"php's {', '.join(lacking)} extension" if lacking else None
    if missing:
        message = f"{missing} is not installed (apt-get install php-cli php-redis php-mysql)"
        if IN_CI:
            pytest.fail(message, pytrace=False)
        pytest.skip(message)
    assert php is not None
    return php


class Shop:
    """The seed's table on MariaDB, its PHP producer, and `delayq` as a process."""

    def __init__(self, php: str, database_url: str, redis_url: str, tmp_path: Path) -> None:
        self.php = php
        self.database_url = database_url
        self.redis = redis.Redis.from_url(redis_url)
        db, r = urlsplit(database_url), urlsplit(redis_url)
        self.mysql = json.dumps(
            {
                "host": db.hostname,
                "port": db.port or 3306,
                "dbname": db.path.lstrip("/"),
                "user": db.username or "root",
                "password": db.password or "",
            }
        )
        self.redis_json = json.dumps(
            {"host": r.hostname, "port": r.port or 6379, "db": int(r.path.lstrip("/") or 0)}
        )
        self.env = {k: v for k, v in os.environ.items() if not k.startswith("DELAYQ_")}
        self.env.update(
            DELAYQ_DATABASE_URL=database_url,
            DELAYQ_REDIS_URL=redis_url,
            DELAYQ_HANDLERS=",".join(HANDLERS),
            DELAYQ_HOME=str(tmp_path / "home"),
            DELAYQ_PHP_CLASSES=PHP_CLASSES,
            PYTHONPATH=os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")])),
        )
        self.conn = mysql_connect(database_url)

    def sql(self, statement: str, args: Any = None) -> list[tuple[Any, ...]]:
        with self.conn.cursor() as cursor:
            cursor.execute(statement, args)
            return list(cursor.fetchall())

    def producer(self, *args: str) -> str:
        done = subprocess.run(
            [self.php, str(PRODUCER), args[0], self.mysql, self.redis_json, *args[1:]],
            capture_output=True,
            text=True,
            timeout=60,
        )
        assert done.returncode == 0, done.stderr
        return done.stdout.strip()

    def add(self, data: Any, delay: int, ext: str, method: str = "run") -> int:
        return int(
            self.producer("add", "App\\Jobs\\Refund", method, json.dumps(data), str(delay), ext)
        )

    def delayq(self, *args: str) -> subprocess.CompletedProcess[str]:
        done = subprocess.run(
            [*DELAYQ, *args], env=self.env, capture_output=True, text=True, timeout=120
        )
        assert done.returncode == 0, (done.stdout, done.stderr)
        return done

    def status(self, job_id: int) -> int:
        return int(self.sql("SELECT status FROM delay_queue WHERE id = %s", (job_id,))[0][0])


@pytest.fixture
def shop(mariadb_url: str, server_redis_url: str, tmp_path: Path) -> Iterator[Shop]:
    php = php_or_fail_in_ci()
    shop = Shop(php, mariadb_url, server_redis_url, tmp_path)
    shop.sql("DROP TABLE IF EXISTS delay_queue")
    shop.redis.flushdb()
    shop.sql(SEED_MYSQL)
    yield shop
    shop.sql("DROP TABLE IF EXISTS delay_queue")
    shop.redis.flushdb()
    shop.redis.close()
    shop.conn.close()


def test_jobs_a_php_producer_writes_run_in_delayq_with_their_data(shop, tmp_path):
    log = str(tmp_path / "handler.log")
    before = shop.add({"log": log, "order": 1}, 0, "order:1")
    later = shop.add({"log": log, "order": 2}, 3600, "order:2")
    due_later = shop.redis.zscore("delay_queue_job", str(later))

    initialised = shop.delayq("init")

    assert "added column run_at" in initialised.stdout.splitlines()
    nested = {
        "log": log,
        "order": 3,
        "items": [{"sku": "A-1", "qty": 2}, {"sku": "B-7", "qty": 1}],
        "sparse": {"3": True, "9": None},
        "note": "crème brûlée",  # 3-byte UTF-8: the seed connects with charset utf8
        "amount": 12.5,
    }
    after = shop.add(nested, 0, "order:3")
    cancelled = shop.add({"log": log, "order": 4}, 0, "order:4")
    assert shop.producer("cancel", "order:4") == "1"
    failing = shop.add({"log": log, "order": 5}, 0, "order:5", method="fail")

    shop.delayq("run")

    lines = read_log(log)
    assert sorted(lines) == sorted(
        [
            "refund " + json.dumps({"log": log, "order": 1}, sort_keys=True),
            "refund " + json.dumps(nested, sort_keys=True, ensure_ascii=False),
            "fail 5",
        ]
    )
    assert [shop.status(job_id) for job_id in (before, after, cancelled, failing)] == [
        10,
        10,
        30,
        20,
    ]
    assert shop.sql("SELECT message FROM delay_queue WHERE id = %s", (after,)) == [("refunded 3",)]
    assert shop.sql("SELECT status, run_at FROM delay_queue WHERE id = %s", (later,)) == [
        (1, due_later)
    ]
    retry = shop.sql("SELECT params, retry_times FROM delay_queue WHERE id > %s", (failing,))
    assert retry == [
        (shop.sql("SELECT params FROM delay_queue WHERE id = %s", (failing,))[0][0], 1)
    ]
    shown = json.loads(shop.delayq("show", str(after), "--json").stdout)
    assert (shown["class"], shown["data"]) == ("App\\Jobs\\Refund", nested)


def test_the_php_producer_is_the_seeds_own_shape(shop):
    job_id = shop.add({"order": 42}, 60, "order:42")

    (params, ext, retry_times, status) = shop.sql(
        "SELECT params, ext_string, retry_times, status FROM delay_queue WHERE id = %s", (job_id,)
    )[0]

    assert params == (
        'a:3:{s:5:"class";s:15:"App\\Jobs\\Refund";s:6:"method";s:3:"run";'
        's:4:"data";a:1:{s:5:"order";i:42;}}'
    )
    assert (ext, retry_times, status) == ("order:42", 0, 1)
    assert shop.redis.zscore("delay_queue_job", str(job_id)) >= time.time() + 58


PRODUCERS_DOC = (ROOT / "docs" / "producers.md").read_text()
# The handler the samples name, as an application would write it.
BILLING = """import json, os


class Refund:
    def run(self, data):
        with open(os.environ["SHOP_LOG"], "a") as log:
            log.write(json.dumps(data) + "\\n")
        return f"refunded {data['order']}"
"""


def sample(language: str) -> str:
    blocks = re.findall(rf"```{language}\n(.*?)```", PRODUCERS_DOC, re.S)
    assert len(blocks) == 1, f"docs/producers.md should have one {language} sample"
    return blocks[0]


def run_sample(language: str, tmp_path: Path, mariadb_url: str, redis_url: str) -> int:
    """The doc's sample as a file, run with the connection settings it reads."""
    db, r = urlsplit(mariadb_url), urlsplit(redis_url)
    if language == "php":
        command = [php_or_fail_in_ci(), str(tmp_path / "producer.php")]
    else:
        from tests.api.test_listen import node_or_fail_in_ci

        command = [node_or_fail_in_ci(), str(tmp_path / "producer.js")]
    (tmp_path / Path(command[1]).name).write_text(sample(language))
    done = subprocess.run(
        command,
        env={
            **os.environ,
            "SHOP_DB_DSN": f"mysql:host={db.hostname};port={db.port or 3306};dbname={db.path[1:]}",
            "SHOP_DB_USER": db.username or "root",
            "SHOP_DB_PASSWORD": db.password or "",
            "SHOP_REDIS_HOST": r.hostname or "",
            "SHOP_REDIS_PORT": str(r.port or 6379),
            "SHOP_REDIS_DB": r.path[1:] or "0",
            "SHOP_MYSQL_URL": mariadb_url,
            "SHOP_REDIS_URL": redis_url,
            "NODE_PATH": str(ROOT / "tests" / "node" / "node_modules"),
        },
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 0, done.stderr
    return int(done.stdout)


@pytest.mark.parametrize(("language", "order"), [("php", 42), ("js", 43)])
@pytest.mark.parametrize("backend", ["mariadb"], indirect=True)
def test_the_samples_of_docs_producers_write_jobs_that_delayq_runs(
    make_queue, backend, language, order, tmp_path, monkeypatch
):
    (tmp_path / "billing").mkdir()
    (tmp_path / "billing" / "__init__.py").write_text("")
    (tmp_path / "billing" / "jobs.py").write_text(BILLING)
    monkeypatch.syspath_prepend(str(tmp_path))
    for name in ("billing", "billing.jobs"):  # another test's billing package, if imported
        monkeypatch.delitem(sys.modules, name, raising=False)
    monkeypatch.setenv("SHOP_LOG", str(tmp_path / "shop.log"))
    queue = make_queue(handlers=("billing.jobs",))
    before = time.time()

    job_id = run_sample(language, tmp_path, backend["database_url"], backend["redis_url"])

    shown = queue.show(job_id)
    assert (shown["class"], shown["method"], shown["data"]) == (
        "billing.jobs.Refund",
        "run",
        {"order": order},
    )
    assert (shown["status"], shown["ext"]) == ("pending", f"order:{order}")
    assert before + 59 < shown["run_at"] < time.time() + 61
    assert queue.index.client.zscore("delay_queue_job", str(job_id)) == shown["run_at"]
    assert queue.run(now=before + 30).succeeded == 0

    assert queue.run(now=shown["run_at"]).succeeded == 1
    assert queue.show(job_id)["message"] == f"refunded {order}"
    assert (tmp_path / "shop.log").read_text() == json.dumps({"order": order}) + "\n"
