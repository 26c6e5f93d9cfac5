"""The `delayq` command through typer's CliRunner, configured only by DELAYQ_* variables, on
both backends: exit codes, the one-line error on stderr, stdout carrying results only, and
bad input refused before anything reaches the table or the schedule."""

from __future__ import annotations

import json
import subprocess
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
import redis
from typer.testing import CliRunner, Result

from delayq.cli import app
from delayq.store.index.keys import DEFAULT_QUEUE_KEY
from delayq.store.table.database import open_database
from tests.conftest import DELAYQ, changes_made

HANDLERS = ("tests.sample_handlers",)
H = "tests.sample_handlers.jobs"
VIEW_KEYS = {
    *("id", "status", "retry_times", "message", "traceback", "ext", "run_at", "class", "method"),
    "data",
    "schedule",
    "every",
    "lock",
}
STATUS_WORDS = {"pending", "running", "success", "failed", "cancelled", "missed"}
SETTINGS_VARIABLES = (
    "DELAYQ_CONFIG",
    "DELAYQ_DATABASE_URL",
    "DELAYQ_REDIS_URL",
    "DELAYQ_HANDLERS",
    "DELAYQ_HOME",
    "DELAYQ_LEASE",
    "DELAYQ_BATCH_SIZE",
    "DELAYQ_SINCE",
    "DELAYQ_MAX_SECONDS",
)

Invoke = Callable[..., Result]


@pytest.fixture
def delayq(
    backend: dict[str, str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> Iterator[Invoke]:
    """Run `delayq ARGS...` in-process against the current backend, after `delayq init`."""
    for name in SETTINGS_VARIABLES:
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("DELAYQ_DATABASE_URL", backend["database_url"])
    monkeypatch.setenv("DELAYQ_REDIS_URL", backend["redis_url"])
    monkeypatch.setenv("DELAYQ_HANDLERS", ",".join(HANDLERS))
    monkeypatch.setenv("DELAYQ_HOME", str(tmp_path / "home"))
    workdir = tmp_path / "cwd"  # no stray ./delayq.toml can join in
    workdir.mkdir()
    monkeypatch.chdir(workdir)
    runner = CliRunner()

    def invoke(*args: str) -> Result:
        return runner.invoke(app, list(args))

    initialised = invoke("init")
    assert initialised.exit_code == 0, initialised.output
    yield invoke


@pytest.fixture
def stored(backend: dict[str, str]) -> Iterator[Callable[[], tuple[int, int, list[str]]]]:
    """What the backend holds: (rows in delay_queue, members of delay_queue_job, schedule keys)."""
    client = redis.Redis.from_url(backend["redis_url"], decode_responses=True)

    def snapshot() -> tuple[int, int, list[str]]:
        db = open_database(backend["database_url"])
        try:
            rows = db.execute_sql("SELECT COUNT(*) FROM delay_queue").fetchone()[0]
        finally:
            db.close()
        keys = sorted(client.scan_iter(match=f"{DEFAULT_QUEUE_KEY}*", _type="zset"))
        return rows, client.zcard(DEFAULT_QUEUE_KEY), keys

    yield snapshot
    client.close()


NOTHING = (0, 0, [])


def assert_one_error_line(result: Result, code: int, *fragments: str) -> None:
    assert result.exit_code == code, (result.stdout, result.stderr)
    assert result.stdout == ""
    lines = result.stderr.splitlines()
    assert len(lines) == 1, result.stderr
    assert lines[0].startswith("delayq: error: ")
    for fragment in fragments:
        assert fragment in lines[0]


def add(delayq: Invoke, *args: str) -> int:
    result = delayq("add", *args)
    assert result.exit_code == 0, result.stderr
    assert result.stderr == ""
    return int(result.stdout)


def payload_overhead(class_path: str, method: str) -> int:
    """Bytes of the stored params around an empty string payload."""
    text = json.dumps({"class": class_path, "method": method, "data": ""}, ensure_ascii=False)
    return len(text.encode())


def string_data_of(total_bytes: int) -> str:
    """JSON text of a string whose job params are exactly `total_bytes` UTF-8 bytes long."""
    room = total_bytes - payload_overhead(H, "echo")
    return json.dumps("é" * (room // 2) + "x" * (room % 2), ensure_ascii=False)


BAD_ADDS = {
    "data-not-json": ([H, "echo", "--data", "{not json"], "--data is not valid JSON"),
    "data-nan": ([H, "echo", "--data", "NaN"], "not JSON-serialisable"),
    "delay-negative": ([H, "echo", "--delay", "-5"], "--delay must be a non-negative"),
    "delay-negative-unit": ([H, "echo", "--delay=-1.5m"], "--delay must be a non-negative"),
    "delay-garbage": ([H, "echo", "--delay", "soon"], "--delay 'soon' is not a duration"),
    "delay-and-at": ([H, "echo", "--delay", "5", "--at", "2030-01-01T00:00:00+00:00"], "not both"),
    "at-garbage": ([H, "echo", "--at", "tomorrow"], "ISO 8601"),
    "handler-os-system": (["os", "system", "--data", '"touch /tmp/x"'], "DELAYQ_HANDLERS"),
    "handler-re-exported": (["tests.sample_handlers.leaky", "system"], "outside DELAYQ_HANDLERS"),
    "handler-through-module": (["tests.sample_handlers.leaky.os", "system"], "not a class"),
    "handler-no-module": (["tests.sample_handlers.no_such_module", "run"], "does not exist"),
    "handler-import-fails": (["tests.sample_handlers.broken", "run"], "RuntimeError: broken"),
    "handler-no-function": ([H, "no_such_function"], "does not exist"),
    "ext-256-ascii": ([H, "echo", "--ext", "x" * 256], "ext is 256 characters; the limit is 255"),
    "ext-256-accented": ([H, "echo", "--ext", "é" * 256], "ext is 256 characters"),
    "params-65536-bytes": (
        [H, "echo", "--data", string_data_of(65536)],
        "job payload is 65536 bytes; the limit is 65535",
    ),
    "data-101-levels": (
        [H, "echo", "--data", "[" * 101 + "]" * 101],
        "nests lists and objects more than 100 levels deep",
    ),
    "data-30000-levels": ([H, "echo", "--data", "[" * 30000 + "]" * 30000], "too deeply"),
    "queue-with-space": ([H, "echo", "--queue", "bad queue!"], "queue name 'bad queue!'"),
    "queue-empty": ([H, "echo", "--queue", ""], "queue name ''"),
    "queue-65-chars": ([H, "echo", "--queue", "q" * 65], "1-64 characters"),
    "at-year-9999": ([H, "echo", "--at", "9999-12-31T00:00:00+00:00"], "10 years ahead"),
    "at-year-1": ([H, "echo", "--at", "0001-01-01T00:00:00+01:00"], "before 1970"),
    "at-before-1970": ([H, "echo", "--at", "1969-12-31T23:59:59+00:00"], "before 1970"),
    "delay-11-years": ([H, "echo", "--delay", f"{11 * 365}d"], "10 years ahead"),
    "delay-many-digits": ([H, "echo", "--delay", "9" * 400], "too long for a duration"),
    "every-11-years": ([H, "echo", "--every", f"{11 * 365}d"], "--every must be between"),
    "timeout-101-years": ([H, "echo", "--timeout", f"{101 * 365}d"], "longer than 100 years"),
    "queue-trailing-newline": ([H, "echo", "--queue", "default\n"], "queue name"),
    "ext-not-utf8": ([H, "echo", "--ext", "a\udcffb"], "ext is not valid UTF-8"),
    "cron-six-fields": ([H, "echo", "--cron", "0 0 9 * * MON"], "is not five cron fields"),
    "cron-minute-61": ([H, "echo", "--cron", "61 * * * *"], "is not a cron expression: "),
    "cron-never-matches": ([H, "echo", "--cron", "0 0 31 2 *"], "that never fires"),
    "cron-control-chars": ([H, "echo", "--cron", "0 9 * * \x1b[2J"], "not five cron fields"),
    "cron-surrogate": ([H, "echo", "--cron", "0 9 * * \udcff"], "not five cron fields"),
    "cron-huge": ([H, "echo", "--cron", "0 " * 100_000], "the limit is 120"),
    "cron-and-every": ([H, "echo", "--cron", "0 9 * * *", "--every", "1h"], "not both"),
    "tz-without-cron": ([H, "echo", "--tz", "Europe/Berlin"], "--tz needs --cron"),
    "tz-unknown": ([H, "echo", "--cron", "0 9 * * *", "--tz", "Mars/Olympus"], "not a known"),
    "tz-path": ([H, "echo", "--cron", "0 9 * * *", "--tz", "../../etc/passwd"], "not a time zone"),
    "tz-absolute": ([H, "echo", "--cron", "0 9 * * *", "--tz", "/etc/localtime"], "not a time"),
    "tz-directory": ([H, "echo", "--cron", "0 9 * * *", "--tz", "Europe"], "not a known"),
    "tz-surrogate": ([H, "echo", "--cron", "0 9 * * *", "--tz", "Europe/\udcff"], "not a time"),
    "tz-huge": ([H, "echo", "--cron", "0 9 * * *", "--tz", "A" * 100_000], "not a time zone"),
}


@pytest.mark.parametrize(("args", "fragment"), BAD_ADDS.values(), ids=BAD_ADDS.keys())
def test_bad_add_exits_2_with_one_error_line_and_writes_nothing(delayq, stored, args, fragment):
    result = delayq("add", *args)

    assert_one_error_line(result, 2, fragment)
    assert stored() == NOTHING


BAD_OTHERS = {
    "run-limit-0": (["run", "--limit", "0"], "--limit must be at least 1"),
    "run-bad-queue": (["run", "--queue", "bad queue!"], "queue name 'bad queue!'"),
    "run-since-garbage": (["run", "--since", "soon"], "--since 'soon' is not a duration"),
    "run-max-seconds-negative": (["run", "--max-seconds", "-1"], "--max-seconds must be"),
    "retry-delay-negative": (["retry", "1", "--delay", "-5"], "--delay must be a non-negative"),
    "cancel-ext-too-long": (["cancel", "--ext", "x" * 256], "ext is 256 characters"),
    "cancel-ext-empty": (["cancel", "--ext", ""], "--ext is empty"),
    "cancel-bad-queue": (["cancel", "--ext", "x", "--queue", "a b"], "queue name 'a b'"),
    "retry-delay-11-years": (["retry", "1", "--delay", f"{11 * 365}d"], "10 years ahead"),
    "cancel-queue-not-utf8": (["cancel", "--ext", "x", "-q", "\udcff"], "queue name"),
    "list-limit-huge": (["list", "--limit", str(10**30)], "--limit must be between 1 and"),
    "list-before-id-huge": (["list", "--before-id", str(10**30)], "--before-id must be"),
    "list-since-huge": (["list", "--since", str(10**30)], "longer than 100 years"),
    "list-ext-not-utf8": (["list", "--ext", "\udcff"], "--ext is not valid UTF-8"),
    "list-ext-nul": (["list", "--ext", "a\0b"], "--ext contains a NUL"),
    "list-ext-empty": (["list", "--ext", ""], "--ext is empty"),
    "list-class-not-utf8": (["list", "--class", "\udcff"], "--class is not valid UTF-8"),
    "list-class-empty": (["list", "--class", ""], "--class is empty"),
    "list-queue-not-utf8": (["list", "--queue", "\udcff"], "queue name"),
    "list-queue-newline": (["list", "--queue", "default\n"], "queue name"),
    "peek-count-huge": (["peek", str(10**30)], "count between 1 and"),
    "purge-older-than-huge": (["purge", "--older-than", str(10**30)], "longer than 100 years"),
    "requeue-class-empty": (["requeue", "--status", "failed", "--class", ""], "--class is empty"),
    "requeue-queue-not-utf8": (["requeue", "--status", "failed", "-q", "\udcff"], "queue name"),
    "run-log-file-nul": (["run", "--log-file", "a\0b"], "--log-file 'a\\x00b' is not a path"),
    "requeue-everything": (["requeue", "--status", "failed"], "narrow it, or add --all"),
    "purge-everything": (["purge", "--older-than", "0"], "to mean it, add --all"),
    "requeue-since-huge": (["requeue", "--status", "failed", "--since", "9" * 30], "100 years"),
}


@pytest.mark.parametrize(("args", "fragment"), BAD_OTHERS.values(), ids=BAD_OTHERS.keys())
def test_bad_options_of_other_commands_exit_2_with_one_error_line(delayq, stored, args, fragment):
    result = delayq(*args)

    assert_one_error_line(result, 2, fragment)
    assert stored() == NOTHING


def test_add_prints_only_the_new_id(delayq, stored):
    result = delayq("add", H, "echo", "--data", '{"n": 1}', "--delay", "30m")

    assert result.exit_code == 0
    assert result.stderr == ""
    assert result.stdout.strip().isdigit()
    assert result.stdout == f"{int(result.stdout)}\n"
    assert stored() == (1, 1, [DEFAULT_QUEUE_KEY])


def test_ext_of_255_characters_and_params_of_65535_bytes_are_accepted_whole(delayq, stored):
    data = string_data_of(65535)
    ext = "é" * 255

    job_id = add(delayq, H, "echo", "--data", data, "--ext", ext)

    view = json.loads(delayq("show", str(job_id), "--json").stdout)
    assert view["ext"] == ext
    assert view["data"] == json.loads(data)
    assert stored() == (1, 1, [DEFAULT_QUEUE_KEY])


def test_show_json_has_exactly_the_contract_keys_with_a_lower_case_status(delayq):
    before = time.time()
    job_id = add(delayq, H, "echo", "--data", '{"n": 1}', "--ext", "order:1", "--delay", "1h")

    result = delayq("show", str(job_id), "--json")

    assert result.exit_code == 0
    assert result.stderr == ""
    view = json.loads(result.stdout)
    assert set(view) == VIEW_KEYS
    assert result.stdout == json.dumps(view, sort_keys=True) + "\n"
    assert view["id"] == job_id
    assert view["status"] == "pending"
    assert (view["class"], view["method"], view["data"]) == (H, "echo", {"n": 1})
    assert (view["ext"], view["retry_times"], view["message"]) == ("order:1", 0, None)
    assert before + 3600 <= view["run_at"] <= time.time() + 3600


def test_run_is_silent_and_show_json_then_reports_success(delayq):
    job_id = add(delayq, H, "echo", "--data", '{"n": 1}')

    ran = delayq("run")

    assert (ran.exit_code, ran.stdout, ran.stderr) == (0, "", "")
    view = json.loads(delayq("show", str(job_id), "--json").stdout)
    assert set(view) == VIEW_KEYS
    assert (view["status"], view["message"]) == ("success", '{"n": 1}')


@pytest.mark.parametrize(
    "command",
    [["show"], ["show", "--json"], ["retry"], ["cancel"]],
    ids=["show", "show-json", "retry", "cancel"],
)
@pytest.mark.parametrize("job_id", ["987654", str(2**63), str(10**30)])
def test_unknown_id_exits_1_and_writes_nothing(delayq, stored, command, job_id):
    result = delayq(*command[:1], job_id, *command[1:])

    assert_one_error_line(result, 1, f"no job with id {job_id}")
    assert stored() == NOTHING


def test_cancel_with_both_an_id_and_ext_exits_2_and_cancels_nothing(delayq, stored):
    job_id = add(delayq, H, "echo", "--ext", "order:1", "--delay", "30m")

    result = delayq("cancel", str(job_id), "--ext", "order:1")

    assert_one_error_line(result, 2, "not both")
    assert json.loads(delayq("show", str(job_id), "--json").stdout)["status"] == "pending"
    assert stored() == (1, 1, [DEFAULT_QUEUE_KEY])


def test_cancel_with_neither_an_id_nor_ext_exits_2(delayq, stored):
    add(delayq, H, "echo", "--delay", "30m")

    result = delayq("cancel")

    assert_one_error_line(result, 2, "not neither")
    assert stored() == (1, 1, [DEFAULT_QUEUE_KEY])


def test_cancel_by_ext_prints_the_count_and_empties_the_schedule(delayq, stored):
    first = add(delayq, H, "echo", "--ext", "order:7", "--delay", "1h")
    add(delayq, H, "echo", "--ext", "order:7", "--delay", "2h")

    result = delayq("cancel", "--ext", "order:7")

    assert (result.exit_code, result.stdout) == (0, "2\n")
    assert json.loads(delayq("show", str(first), "--json").stdout)["status"] == "cancelled"
    assert stored()[:2] == (2, 0)


def test_cancel_with_an_empty_ext_cancels_nothing_and_keeps_series_recurring(
    delayq, stored, backend
):
    # An unset shell variable: every job added without --ext has the empty key.
    once = add(delayq, H, "echo", "--delay", "30m")
    timer = add(delayq, H, "echo", "--delay", "30m", "--every", "1h")

    result = delayq("cancel", "--ext", "")

    assert_one_error_line(result, 2, "--ext is empty")
    for job_id in (once, timer):
        assert json.loads(delayq("show", str(job_id), "--json").stdout)["status"] == "pending"
    assert stored() == (2, 2, [DEFAULT_QUEUE_KEY])
    db = open_database(backend["database_url"])
    try:
        (every,) = db.execute_sql(f"SELECT every FROM delay_queue WHERE id = {timer}").fetchone()
    finally:
        db.close()
    assert every == 3600


def test_retry_of_a_pending_job_moves_it_to_now_and_prints_its_id(delayq, stored):
    job_id = add(delayq, H, "echo", "--delay", "1h")

    result = delayq("retry", str(job_id))

    assert (result.exit_code, result.stdout, result.stderr) == (0, f"{job_id}\n", "")
    assert json.loads(delayq("show", str(job_id), "--json").stdout)["run_at"] < time.time() + 5
    assert stored() == (1, 1, [DEFAULT_QUEUE_KEY])


def test_retry_of_a_finished_job_prints_the_new_id(delayq, stored):
    job_id = add(delayq, H, "echo", "--data", "7")
    assert delayq("run").exit_code == 0

    result = delayq("retry", str(job_id), "--delay", "30m")

    assert result.exit_code == 0
    new_id = int(result.stdout)
    view = json.loads(delayq("show", str(new_id), "--json").stdout)
    assert (view["status"], view["retry_times"], view["data"]) == ("pending", 1, 7)
    assert stored() == (2, 1, [DEFAULT_QUEUE_KEY])


USAGE_ERRORS = {
    "id-not-a-number": (["show", "not-a-number"], "Invalid value for 'ID'"),
    "negative-count": (["peek", "-1"], "No such option: -1"),
    "missing-argument": (["add"], "Missing argument 'CLASS'"),
    "limit-not-a-number": (["list", "--limit", "x"], "Invalid value for '--limit'"),
    "unknown-command": (["bogus"], "No such command 'bogus'"),
    "escape-in-id": (["cancel", "\x1b[31m"], "'\\x1b[31m' is not a valid"),
}


@pytest.mark.parametrize(("args", "fragment"), USAGE_ERRORS.values(), ids=USAGE_ERRORS)
def test_usage_error_from_typer_is_one_line_exit_2_and_writes_nothing(
    delayq, stored, args, fragment
):
    result = delayq(*args)

    assert_one_error_line(result, 2, fragment, "--help)")
    assert stored() == NOTHING


def test_usage_error_of_the_run_command_alone_is_one_line_too(cli_env):
    # `delayq run` builds only its own command (cli/__init__.py): a path of its own.
    result = subprocess.run(
        [*DELAYQ, "run", "--limit", "x"], env=cli_env, capture_output=True, text=True, timeout=60
    )

    assert (result.returncode, result.stdout) == (2, "")
    (line,) = result.stderr.splitlines()
    assert line.startswith("delayq: error: Invalid value for '--limit'")
    assert "'x' is not a valid int" in line
    assert line.endswith("(see delayq run --help)")


def test_init_twice_is_fine_and_keeps_the_jobs(delayq, stored):
    job_id = add(delayq, H, "echo", "--delay", "30m")

    result = delayq("init")

    assert result.exit_code == 0
    assert result.stderr == ""
    *changes, last = result.stdout.splitlines()
    assert changes_made(changes) == []
    assert last.startswith("all in place: database ")
    assert delayq("init").exit_code == 0
    assert stored() == (1, 1, [DEFAULT_QUEUE_KEY])
    assert json.loads(delayq("show", str(job_id), "--json").stdout)["status"] == "pending"


@pytest.fixture
def bare_env(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> CliRunner:
    """No backend fixture: each test sets the DELAYQ_* variables it is about."""
    for name in SETTINGS_VARIABLES:
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("DELAYQ_HANDLERS", ",".join(HANDLERS))
    monkeypatch.setenv("DELAYQ_HOME", str(tmp_path / "home"))
    monkeypatch.chdir(tmp_path)
    return CliRunner()


@pytest.mark.parametrize(
    ("command", "first_failure"),
    [
        (["init"], "database error"),
        # status reads Redis's clock before the table
        (["status"], "Redis error"),
        (["show", "1"], "database error"),
        # add reads Redis's clock before it writes the row
        (["add", H, "echo"], "Redis error"),
    ],
    ids=["init", "status", "show", "add"],
)
def test_unreachable_servers_exit_1_with_one_error_line(
    bare_env, monkeypatch, command, first_failure
):
    # Port 1 on loopback: nothing listens, so the connection is refused at once.
    monkeypatch.setenv("DELAYQ_DATABASE_URL", "mysql://root@127.0.0.1:1/delayq")
    monkeypatch.setenv("DELAYQ_REDIS_URL", "redis://127.0.0.1:1/0")

    result = bare_env.invoke(app, command)

    assert_one_error_line(result, 1, first_failure)


@pytest.mark.parametrize("command", [["init"], ["run"]], ids=["init", "run"])
def test_unreachable_redis_exits_1_with_one_error_line(bare_env, monkeypatch, tmp_path, command):
    monkeypatch.setenv("DELAYQ_DATABASE_URL", f"sqlite:///{tmp_path / 'delayq.db'}")
    monkeypatch.setenv("DELAYQ_REDIS_URL", "redis://127.0.0.1:1/0")

    result = bare_env.invoke(app, command)

    assert_one_error_line(result, 1, "Redis error")


def test_bad_setting_exits_2_naming_the_variable(bare_env, monkeypatch):
    monkeypatch.setenv("DELAYQ_BATCH_SIZE", "0")

    result = bare_env.invoke(app, ["status"])

    assert_one_error_line(result, 2, "DELAYQ_BATCH_SIZE")


BAD_URLS = {
    "mysql-port-parameter": ("mysql://root@127.0.0.1:3306/db?port=x", None, "the port must be"),
    "mysql-unknown-parameter": ("mysql://root@127.0.0.1/db?bogus=1", None, "knows no 'bogus'"),
    "mysql-port-out-of-range": ("mysql://root@127.0.0.1:99999/db", None, "the port must be"),
    "mysql-port-not-a-number": ("mysql://root@127.0.0.1:abc/db", None, "the port must be"),
    "mysql-bad-timeout": ("mysql://root@127.0.0.1/db?connect_timeout=0", None, "connect_timeout"),
    "mysql-unclosed-ipv6": ("mysql://root@[::1:3306/db", None, "not a URL delayq can read"),
    "database-scheme": ("postgres://root@127.0.0.1/db", None, "use mysql://"),
    "redis-scheme": (None, "http://127.0.0.1:6379/0", "use redis://"),
    "redis-port-out-of-range": (None, "redis://127.0.0.1:99999/0", "the port must be"),
    "redis-unknown-parameter": (None, "redis://127.0.0.1/0?bogus=1", "knows no 'bogus'"),
    "redis-bad-timeout": (None, "redis://127.0.0.1/0?socket_timeout=x", "socket_timeout"),
    "redis-database-not-a-number": (None, "redis://127.0.0.1:6379/abc", "database number"),
    "redis-raw-slash-in-password": (None, "redis://:a/b@127.0.0.1/0", "percent-encoded"),
}


@pytest.mark.parametrize(("database_url", "redis_url", "fragment"), BAD_URLS.values(), ids=BAD_URLS)
@pytest.mark.parametrize("command", [["status"], ["run"]], ids=["status", "run"])
def test_a_bad_server_url_is_a_usage_error_naming_the_variable(
    bare_env, monkeypatch, tmp_path, database_url, redis_url, fragment, command
):
    monkeypatch.setenv("DELAYQ_DATABASE_URL", database_url or f"sqlite:///{tmp_path / 'q.db'}")
    monkeypatch.setenv("DELAYQ_REDIS_URL", redis_url or "redis://127.0.0.1:1/0")

    result = bare_env.invoke(app, command)

    variable = "DELAYQ_DATABASE_URL" if database_url else "DELAYQ_REDIS_URL"
    assert_one_error_line(result, 2, variable, fragment)


def test_bulk_commands_that_match_everything_need_all_and_then_act(delayq, backend):
    failed = add(delayq, H, "fail_for_good", "--data", '{"log": "/dev/null"}')
    assert delayq("run").exit_code == 0

    refused = [
        delayq("requeue", "--status", "failed"),
        delayq("purge", "--older-than", "0", "--status", "failed"),
    ]
    counted = delayq("requeue", "--status", "failed", "--dry-run")
    requeued = delayq("requeue", "--status", "failed", "--all")

    assert [result.exit_code for result in refused] == [2, 2]
    assert all("--all" in result.stderr for result in refused)
    assert (counted.exit_code, counted.stdout) == (0, "1\n")
    assert (requeued.exit_code, requeued.stdout) == (0, "1\n")
    assert json.loads(delayq("show", str(failed), "--json").stdout)["status"] == "failed"
    purged = delayq("purge", "--older-than", "0", "--status", "cancelled", "--all")
    assert (purged.exit_code, purged.stdout) == (0, "0\n")
