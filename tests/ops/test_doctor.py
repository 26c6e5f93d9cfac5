"""`delayq doctor`: one ok / warn / FAIL line per check, exit 1 on any FAIL, on both backends."""

from __future__ import annotations

import subprocess

import pytest
import redis

from delayq.ops.sampling import SAMPLE
from delayq.store import embedded
from delayq.store.index.keys import INDEXED_KEY, schedule_key
from delayq.store.table import counts
from delayq.store.table.counts import Counts
from delayq.store.table.database import sqlite_file, sqlite_url
from delayq.store.table.model import Job
from tests.cli.test_progress import on_a_terminal
from tests.conftest import DELAYQ, with_kept_counts
from tests.support.invoke import invoke

H = "tests.sample_handlers.jobs"


def lines_of(result) -> list[tuple[str, str, str]]:
    """(level, name, detail) of each line the doctor printed."""
    out = []
    for line in result.stdout.splitlines():
        level, name, detail = line.split(None, 2)
        out.append((level, name, detail))
    return out


def levels(result) -> dict[str, list[str]]:
    found: dict[str, list[str]] = {}
    for level, name, _ in lines_of(result):
        found.setdefault(name, []).append(level)
    return found


def line(result, name: str) -> tuple[str, str]:
    (found,) = [(level, detail) for level, check, detail in lines_of(result) if check == name]
    return found


def test_a_healthy_setup_is_all_ok(queue, cli_env):
    result = invoke(cli_env, "doctor")

    assert result.exit_code == 0, result.output
    assert levels(result) == {
        "config": ["ok"],
        "handlers": ["ok"],
        "database": ["ok"],
        "columns": ["ok"],
        "index": ["ok"] * 5,
        # Kept by triggers, or read from the table where the server refused them (the
        # suite's MariaDB, as production runs it: tests/store/table/test_privileges.py).
        "counts": ["ok" if Counts(queue.table).installed() else "warn"],
        "redis": ["ok"],
        "topology": ["ok"],
        "eviction": ["ok"],
        # The embedded server keeps an append-only file; the suite's shared server nothing.
        "disk": ["ok" if saves(queue) else "warn"],
        "schedule": ["ok"],
        "orphans": ["ok"],
        "journal": ["ok"],
        "flow": ["ok"],
        "members": ["ok"],
    }
    assert "tests.sample_handlers imports" in line(result, "handlers")[1]
    assert any(word in line(result, "database")[1] for word in ("SQLite", "MariaDB", "MySQL"))
    assert line(result, "redis")[1].startswith("Redis ")
    assert line(result, "topology")[1] == "a primary with no replica"


def saves(queue) -> bool:
    client = queue.index.client
    return bool(client.info("persistence")["aof_enabled"] or client.config_get("save")["save"])


def test_a_redis_that_keeps_nothing_on_disk_is_a_warning(queue, cli_env):
    level, detail = line(invoke(cli_env, "doctor"), "disk")

    if saves(queue):
        assert (level, detail) == ("ok", "Redis keeps the schedule on disk: AOF")
    else:
        assert level == "warn"
        assert detail.startswith("Redis keeps nothing on disk: a restart empties the schedule")


def test_missing_table_fails_and_says_to_run_init(backend, cli_env):
    if path := sqlite_file(backend["database_url"]):
        path.touch()  # a database without the table (none at all: tests/store/test_sqlite_urls.py)
    result = invoke(cli_env, "doctor")

    assert result.exit_code == 1
    assert line(result, "table") == ("FAIL", "delay_queue does not exist; run `delayq init`")
    assert line(result, "schedule")[0] == "warn"


def test_missing_columns_fail_with_their_names(queue, cli_env):
    queue.db.execute_sql("DROP TABLE delay_queue")
    queue.db.execute_sql("CREATE TABLE delay_queue (id BIGINT PRIMARY KEY, params TEXT)")

    result = invoke(cli_env, "doctor")

    assert result.exit_code == 1
    level, detail = line(result, "columns")
    assert level == "FAIL"
    assert detail.startswith("delay_queue lacks message, ext_string, retry_times, status")


def test_missing_index_is_a_warning_with_the_statement_to_fix_it(queue, cli_env):
    on_table = " ON delay_queue" if "mysql" in cli_env["DELAYQ_DATABASE_URL"] else ""
    queue.db.execute_sql(f"DROP INDEX job_chain_id{on_table}")

    result = invoke(cli_env, "doctor")

    assert result.exit_code == 0
    # The disk's and, where the server refused the triggers, the counts' warnings are others'.
    elsewhere = {"disk"} if Counts(queue.table).installed() else {"disk", "counts"}
    warnings = [
        detail
        for level, name, detail in lines_of(result)
        if level == "warn" and name not in elsewhere
    ]
    assert warnings == [
        "(chain_id) is missing, so queries scan the table; "
        "CREATE INDEX job_chain_id ON delay_queue (chain_id)"
    ]


@with_kept_counts
def test_the_counts_line_says_triggers_keep_the_pending_counts(queue, cli_env):
    assert line(invoke(cli_env, "doctor"), "counts") == ("ok", counts.KEPT_BY_TRIGGERS)


@with_kept_counts
def test_without_the_triggers_the_counts_line_warns_they_are_read_from_the_index(queue, cli_env):
    for name in counts.TRIGGERS:
        queue.db.execute_sql(f"DROP TRIGGER {name}")

    result = invoke(cli_env, "doctor")

    assert result.exit_code == 0
    level, detail = line(result, "counts")
    assert level == "warn"
    assert detail.startswith(f"{counts.WITHOUT_TRIGGERS} (estimated beyond 10000 a queue)")
    if queue.table.mysql:  # the grant, and the server setting if it logs binary
        assert "`delayq init`" in detail and "TRIGGER" in detail
    else:
        assert detail.endswith("no triggers keep them; `delayq init` makes them")


def test_handler_prefix_that_does_not_import_fails(queue, cli_env):
    env = dict(cli_env, DELAYQ_HANDLERS="tests.sample_handlers,billing.nowhere")

    result = invoke(env, "doctor")

    assert result.exit_code == 1
    assert levels(result)["handlers"] == ["ok", "FAIL"]
    assert "DELAYQ_HANDLERS entry 'billing.nowhere'" in result.stdout


def test_a_handler_that_does_not_import_leaves_the_table_and_schedule_checks_in(queue, cli_env):
    env = dict(cli_env, DELAYQ_HANDLERS="tests.sample_handlers,billing.nowhere")

    found = levels(invoke(env, "doctor"))

    assert (found["orphans"], found["journal"], found["members"]) == (["ok"], ["ok"], ["ok"])


def test_checks_that_cannot_run_after_a_missing_table_say_why(backend, cli_env):
    if path := sqlite_file(backend["database_url"]):
        path.touch()

    result = invoke(cli_env, "doctor")

    assert result.exit_code == 1
    assert line(result, "columns") == ("skip", "not checked: delay_queue does not exist")
    assert line(result, "index") == ("skip", "not checked: delay_queue does not exist")
    assert line(result, "orphans") == ("skip", "not checked: the table check FAILed")
    assert line(result, "journal") == ("skip", "not checked: the table check FAILed")


def test_every_check_after_a_failed_connect_says_it_was_not_made(tmp_path, cli_env):
    env = dict(cli_env, DELAYQ_DATABASE_URL=sqlite_url(tmp_path / "nowhere.db"))

    result = invoke(env, "doctor")

    assert result.exit_code == 1
    assert [(level, name) for level, name, _ in lines_of(result)] == [
        ("ok", "config"),
        ("ok", "handlers"),
        ("FAIL", "connect"),
        *(("skip", name) for name in NAMES_AFTER_CONNECT),
    ]
    assert line(result, "journal")[1] == "not checked: delayq could not connect"


NAMES_AFTER_CONNECT = [
    "database",
    "columns",
    "index",
    "counts",
    "redis",
    "topology",
    "eviction",
    "disk",
    "schedule",
    "members",
    "orphans",
    "journal",
    "flow",
]


def test_a_class_inside_a_module_is_a_valid_prefix(queue, cli_env):
    env = dict(cli_env, DELAYQ_HANDLERS="tests.sample_handlers.jobs.Refund")

    assert invoke(env, "doctor").exit_code == 0


def test_empty_allowlist_fails(queue, cli_env):
    env = dict(cli_env, DELAYQ_HANDLERS="")

    result = invoke(env, "doctor")

    assert result.exit_code == 1
    assert line(result, "handlers")[0] == "FAIL"


def test_missing_index_marker_is_a_warning(queue, cli_env):
    queue.index.client.delete(INDEXED_KEY)

    result = invoke(cli_env, "doctor")

    assert result.exit_code == 0
    assert line(result, "schedule")[0] == "warn"


def test_a_bad_setting_fails_before_anything_is_contacted(cli_env):
    result = invoke(dict(cli_env, DELAYQ_LEASE="1"), "doctor")

    assert result.exit_code == 1
    assert lines_of(result) == [
        ("FAIL", "config", "DELAYQ_LEASE must be at least 2 seconds"),
        *(("skip", name, "not checked: the settings are wrong") for name in ["handlers"]),
        *(("skip", name, "not checked: the settings are wrong") for name in NAMES_AFTER_CONNECT),
    ]


@pytest.mark.parametrize("broken", ["DELAYQ_DATABASE_URL", "DELAYQ_REDIS_URL"])
def test_an_unreachable_server_fails(queue, cli_env, broken):
    closed_port = {
        "DELAYQ_DATABASE_URL": "mysql://root@127.0.0.1:1/delayq",
        "DELAYQ_REDIS_URL": "redis://127.0.0.1:1/0",
    }
    result = invoke(dict(cli_env, **{broken: closed_port[broken]}), "doctor")

    assert result.exit_code == 1
    name = "database" if broken == "DELAYQ_DATABASE_URL" else "redis"
    level, detail = line(result, name)
    assert level == "FAIL" and "cannot be used" in detail and "127.0.0.1:1" in detail


def test_an_evicting_redis_is_a_warning(tmp_path, cli_env):
    # A Redis of this test's own: the policy is server-wide, and the shared one is not ours.
    home = tmp_path / "evicting"
    url = embedded.redis_url(home)
    client = redis.Redis.from_url(url)
    client.config_set("maxmemory-policy", "allkeys-lru")
    env = dict(
        cli_env,
        DELAYQ_REDIS_URL=url,
        DELAYQ_DATABASE_URL=sqlite_url(tmp_path / "evicting.db"),
    )
    try:
        assert invoke(env, "init").exit_code == 0
        result = invoke(env, "doctor")
    finally:
        client.close()
        embedded.stop(home)

    assert result.exit_code == 0
    level, detail = line(result, "eviction")
    assert level == "warn"
    assert detail.startswith("maxmemory-policy is allkeys-lru: an evicting Redis silently drops")


def test_rows_missing_from_the_schedule_are_counted(queue, cli_env):
    old = queue.index.clock.now() - 120
    ids = [queue.add(H, "echo", {}, at=old) for _ in range(3)]
    queue.add(H, "echo", {}, at=queue.index.clock.now() - 5)  # within the grace: a run may hold it
    queue.index.client.zrem(schedule_key("default"), *map(str, ids[:2]))  # the ZADD that failed

    result = invoke(cli_env, "doctor")

    assert result.exit_code == 0, result.output
    level, detail = line(result, "orphans")
    assert (level, detail.split()[0]) == ("warn", "2")
    assert queue.run().succeeded == 4  # the sweep puts them back, and they run
    assert line(invoke(cli_env, "doctor"), "orphans")[0] == "ok"


def test_journal_fields_of_gone_runs_are_counted(queue, cli_env):
    running = queue.add(H, "echo", {})
    Job.update(status=2, lease_token="alive", lease_until=queue.index.clock.now() + 60).where(
        Job.id == running
    ).execute()
    journal = "{delay_queue_job}:journal"
    queue.index.client.hset(
        journal,
        mapping={
            str(running): '[10, "", false, 1.0]',  # the live run's outcome: not stale
            "order:alive": f"{running}",
            "order:gone": "1,2",
            "starts:gone": "1",
            "start:gone:7": "1",
            "12345": '[10, "", false, 1.0]',
        },
    )

    result = invoke(cli_env, "doctor")

    assert result.exit_code == 0, result.output
    level, detail = line(result, "journal")
    assert (level, detail.split()[0]) == ("warn", "4")


def test_doctor_reads_only(queue, cli_env):
    before = Job.select().count()

    invoke(cli_env, "doctor")

    assert Job.select().count() == before


def test_schedule_members_that_are_not_job_ids_are_counted_per_queue(queue, cli_env):
    job_id = queue.add("tests.sample_handlers.jobs", "echo", delay=1800)  # on the schedule
    client = queue.index.client
    client.zadd("delay_queue_job", {"²": 1, "abc": 2, "-1": 3, "007": 4, "9" * 30: 5})
    client.zadd("delay_queue_job:mail", {"x": 1})
    client.sadd("delay_queue_queues", "mail")

    result = invoke(cli_env, "doctor")

    assert result.exit_code == 0, result.output
    level, detail = line(result, "members")
    assert level == "warn"
    assert "default 5, mail 1" in detail
    assert client.zscore("delay_queue_job", str(job_id)) is not None  # doctor only reads
    assert client.zcard("delay_queue_job") == 6


def schedule_ids(queue, count: int, first_id: int = 10**9) -> None:
    """`count` members that are job ids (of no row: doctor's members check reads Redis
    alone), due one second apart from a day ahead."""
    client = queue.index.client
    start = queue.index.clock.now() + 86400
    for offset in range(0, count, 10_000):
        chunk = range(offset, min(offset + 10_000, count))
        client.zadd("delay_queue_job", {str(first_id + n): start + n for n in chunk})


def test_a_large_schedule_is_sampled_and_the_line_says_so(queue, cli_env):
    schedule_ids(queue, 2500)

    result = invoke(cli_env, "doctor")

    assert result.exit_code == 0, result.output
    assert line(result, "members") == (
        "ok",
        "every schedule member is a job id (sampled: the 1,000 due first and 1,000 at random "
        "of 2,500; `doctor --full` checks all)",
    )


def test_a_schedule_no_larger_than_the_sample_is_read_whole(queue, cli_env):
    schedule_ids(queue, 2 * SAMPLE - 1)
    queue.index.client.zadd("delay_queue_job", {"junk": 10**10})  # the last of 2 * SAMPLE

    assert line(invoke(cli_env, "doctor"), "members") == (
        "warn",
        "schedule members that are not job ids (default 1): another producer wrote them; "
        "a run drops them when they fall due, `delayq reconcile` at once",
    )


def test_full_finds_a_stray_member_far_from_the_due_end_that_a_sample_misses(queue, cli_env):
    # One stray among 100,000 ids, due last: the 1,000 due first never include it and 1,000
    # at random do one time in a hundred, so a --full that only sampled would pass this test
    # at most that often.
    schedule_ids(queue, 100_000)
    queue.index.client.zadd("delay_queue_job", {"not-an-id": 10**10})

    sampled = invoke(cli_env, "doctor")
    full = invoke(cli_env, "doctor", "--full")

    # Whether the sample met the stray (one time in a hundred) or not, it says it sampled.
    assert "sampled: the 1,000 due first and 1,000 at random of 100,001;" in "".join(
        line(sampled, "members")
    )
    assert (full.exit_code, full.stderr) == (0, "")
    assert line(full, "members") == (
        "warn",
        "schedule members that are not job ids (default 1): another producer wrote them; "
        "a run drops them when they fall due, `delayq reconcile` at once",
    )
    assert queue.index.client.zcard("delay_queue_job") == 100_001  # doctor only reads


def test_orphans_are_looked_for_among_the_longest_overdue_unless_full(queue, cli_env):
    now = queue.index.clock.now()
    ids = [queue.add(H, "echo", {}, at=now - 3600 + n) for n in range(SAMPLE + 1)]
    queue.index.client.zrem(schedule_key("default"), str(ids[-1]))  # overdue the least

    sampled = line(invoke(cli_env, "doctor"), "orphans")
    full = line(invoke(cli_env, "doctor", "--full"), "orphans")

    assert sampled == (
        "ok",
        "every overdue pending row is on the schedule (checked: the 1,000 overdue longest of "
        "each queue; `doctor --full` checks all)",
    )
    assert full == (
        "warn",
        "1 pending rows overdue by 30s are not on the schedule; the next run's sweep puts "
        "them back",
    )


def test_full_without_a_terminal_prints_the_lines_alone(queue, cli_env):
    schedule_ids(queue, 3000)

    result = subprocess.run(
        [*DELAYQ, "doctor", "--full"], env=cli_env, capture_output=True, text=True, timeout=60
    )

    assert (result.returncode, result.stderr) == (0, "")
    assert "\x1b" not in result.stdout
    assert [line.split()[1] for line in result.stdout.splitlines()][-4:] == [
        "members",
        "orphans",
        "journal",
        "flow",
    ]
    assert "every schedule member is a job id\n" in result.stdout


def test_full_on_a_terminal_shows_how_far_it_got(queue, cli_env):
    schedule_ids(queue, 3000)

    result = on_a_terminal(cli_env, "doctor", "--full")

    assert result.returncode == 0, result.stdout
    assert "default: schedule members" in result.stdout
    assert "3,000 of 3,000" in result.stdout
    assert "ok    members   every schedule member is a job id\n" in result.stdout


@pytest.mark.parametrize("flag", ["--ful", "--full=yes", "--sample"])
def test_a_bad_flag_exits_2(queue, cli_env, flag):
    result = invoke(cli_env, "doctor", flag)

    assert result.exit_code == 2
    assert result.stdout == ""


def test_the_flow_line_names_paused_and_limited_queues_and_held_locks(queue, cli_env):
    from delayq.store.table.locks import Locks

    assert line(invoke(cli_env, "doctor"), "flow") == ("ok", "no queue is paused or limited")
    queue.limit("sms", rate="10/s", concurrency=2)
    Locks(queue.table).take("order:42", 1, 0.0)
    assert line(invoke(cli_env, "doctor"), "flow") == (
        "ok",
        "limited: sms 10/s and 2 at once; 1 per-key lock held",
    )
    queue.pause("email", now=1_800_000_000.0)
    result = invoke(cli_env, "doctor")
    assert result.exit_code == 0
    assert line(result, "flow") == (
        "warn",
        "paused: email (since 2027-01-15T08:00:00.000+00:00); limited: sms 10/s and 2 at once; "
        "1 per-key lock held; `delayq resume NAME` lets a paused queue's jobs start again",
    )
