"""delayq.config: load_settings from an explicit environment and config file, validation
that names the variable at fault, and redact_url for anything printed or logged."""

from __future__ import annotations

from pathlib import Path

import pytest

from delayq.config import DEFAULTS, Settings, load_settings, redact_url
from delayq.errors import ConfigError


@pytest.fixture(autouse=True)
def no_config_file_in_cwd(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """load_settings also reads ./delayq.toml; run from an empty directory so none is found."""
    workdir = tmp_path / "cwd"
    workdir.mkdir()
    monkeypatch.chdir(workdir)


def write_toml(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "delayq.toml"
    path.write_text(text)
    return path


def test_empty_environment_and_no_file_give_the_documented_defaults():
    settings = load_settings({}, None)

    assert settings == Settings()
    assert settings.database_url is None
    assert settings.redis_url is None
    assert settings.handlers == ()
    assert settings.home == Path(".delayq")
    assert (settings.lease, settings.batch_size) == (60.0, 500)
    assert (settings.since, settings.max_seconds) == (86400.0, 50.0)
    assert DEFAULTS["lease"] == settings.lease


def test_settings_are_frozen():
    settings = load_settings({}, None)

    with pytest.raises(AttributeError):
        settings.lease = 5  # type: ignore[misc]


def test_file_values_replace_the_defaults(tmp_path):
    path = write_toml(
        tmp_path,
        'database_url = "mysql://app@db:3306/app"\n'
        'handlers = ["billing.jobs", "mail.jobs"]\n'
        'lease = "2m"\n'
        "batch_size = 100\n"
        "since = 3600\n",
    )

    settings = load_settings({}, path)

    assert settings.database_url == "mysql://app@db:3306/app"
    assert settings.handlers == ("billing.jobs", "mail.jobs")
    assert settings.lease == 120.0
    assert settings.batch_size == 100
    assert settings.since == 3600.0
    assert settings.max_seconds == 50.0


def test_environment_wins_over_the_file_and_the_file_fills_the_rest(tmp_path):
    path = write_toml(
        tmp_path,
        'redis_url = "redis://file-host:6379/0"\nlease = 30\nbatch_size = 100\n'
        'handlers = ["from.file"]\n',
    )
    environ = {
        "DELAYQ_REDIS_URL": "redis://127.0.0.1:6379/3",
        "DELAYQ_LEASE": "90s",
        "DELAYQ_HANDLERS": "from.env",
    }

    settings = load_settings(environ, path)

    assert settings.redis_url == "redis://127.0.0.1:6379/3"
    assert settings.lease == 90.0
    assert settings.handlers == ("from.env",)
    assert settings.batch_size == 100


def test_delayq_config_variable_names_the_file(tmp_path):
    path = write_toml(tmp_path, "batch_size = 7\n")

    settings = load_settings({"DELAYQ_CONFIG": str(path)}, None)

    assert settings.batch_size == 7


def test_delayq_toml_in_the_working_directory_is_read_when_no_path_is_given():
    Path("delayq.toml").write_text("batch_size = 9\n")

    assert load_settings({}, None).batch_size == 9


def test_empty_variable_counts_as_unset(tmp_path):
    path = write_toml(tmp_path, "batch_size = 100\n")

    settings = load_settings({"DELAYQ_BATCH_SIZE": "", "DELAYQ_LEASE": ""}, path)

    assert (settings.batch_size, settings.lease) == (100, 60.0)


def test_handlers_variable_is_a_comma_list_with_spaces_and_empty_items_ignored():
    settings = load_settings({"DELAYQ_HANDLERS": " billing.jobs, mail ,,tests.sample_handlers,"})

    assert settings.handlers == ("billing.jobs", "mail", "tests.sample_handlers")


@pytest.mark.parametrize(
    ("text", "seconds"),
    [("90s", 90.0), ("90", 90.0), ("2m", 120.0), ("1.5m", 90.0), ("1h", 3600.0)],
)
def test_lease_takes_a_duration(text, seconds):
    assert load_settings({"DELAYQ_LEASE": text}).lease == seconds


def test_embedded_idle_limit_is_ten_minutes_unless_given_as_a_duration():
    assert load_settings({}).embedded_idle == 600.0
    assert load_settings({"DELAYQ_EMBEDDED_IDLE": "2s"}).embedded_idle == 2.0
    assert load_settings({"DELAYQ_EMBEDDED_IDLE": "1h"}).embedded_idle == 3600.0


def test_since_and_max_seconds_take_durations():
    settings = load_settings({"DELAYQ_SINCE": "2d", "DELAYQ_MAX_SECONDS": "45s"})

    assert (settings.since, settings.max_seconds) == (172800.0, 45.0)


def test_home_expands_the_user_directory():
    settings = load_settings({"DELAYQ_HOME": "~/jobs"})

    assert settings.home == Path.home() / "jobs"


def test_unknown_key_in_the_file_is_a_config_error_naming_the_key(tmp_path):
    path = write_toml(tmp_path, "batch_size = 10\nleese = 30\n")

    with pytest.raises(ConfigError, match="unknown keys: leese"):
        load_settings({}, path)


def test_file_that_is_not_toml_is_a_config_error(tmp_path):
    path = write_toml(tmp_path, "batch_size = = 3\n")

    with pytest.raises(ConfigError, match="cannot read config file"):
        load_settings({}, path)


def test_named_config_file_that_does_not_exist_is_a_config_error(tmp_path):
    with pytest.raises(ConfigError, match="does not exist"):
        load_settings({"DELAYQ_CONFIG": str(tmp_path / "missing.toml")}, None)


@pytest.mark.parametrize("value", ["lots", "1.5", "0", "-3", "5001"])
def test_bad_batch_size_is_a_config_error_naming_the_variable(value):
    with pytest.raises(ConfigError, match="DELAYQ_BATCH_SIZE"):
        load_settings({"DELAYQ_BATCH_SIZE": value})


def test_bad_batch_size_in_the_file_is_a_config_error_naming_the_variable(tmp_path):
    path = write_toml(tmp_path, "batch_size = 0\n")

    with pytest.raises(ConfigError, match="DELAYQ_BATCH_SIZE"):
        load_settings({}, path)


@pytest.mark.parametrize(
    ("name", "value"),
    [
        ("DELAYQ_LEASE", "soon"),
        ("DELAYQ_LEASE", "-5s"),
        ("DELAYQ_LEASE", "1s"),
        ("DELAYQ_SINCE", "yesterday"),
        ("DELAYQ_MAX_SECONDS", "5 minutes"),
        ("DELAYQ_EMBEDDED_IDLE", "0"),
        ("DELAYQ_EMBEDDED_IDLE", "-5s"),
        ("DELAYQ_EMBEDDED_IDLE", "inf"),
        ("DELAYQ_EMBEDDED_IDLE", "never"),
    ],
)
def test_bad_duration_is_a_config_error_naming_the_variable(name, value):
    with pytest.raises(ConfigError, match=name):
        load_settings({name: value})


def test_handler_prefix_that_is_not_a_dotted_module_path_is_a_config_error():
    with pytest.raises(ConfigError, match="DELAYQ_HANDLERS entry 'billing/jobs'"):
        load_settings({"DELAYQ_HANDLERS": "ok.jobs,billing/jobs"})


@pytest.mark.parametrize(
    ("url", "expected"),
    [
        (
            "mysql://delayq:s3cret@db.internal:3306/app",
            "mysql://delayq:***@db.internal:3306/app",
        ),
        ("mysql://delayq:s3cret@db.internal/app", "mysql://delayq:***@db.internal/app"),
        ("mysql://delayq:p%40ss%3Aw0rd@10.0.0.5:3306/app", "mysql://delayq:***@10.0.0.5:3306/app"),
        ("redis://:s3cret@cache.internal:6379/2", "redis://:***@cache.internal:6379/2"),
        (
            "redis://default:s3cret@cache.internal:6379/0",
            "redis://default:***@cache.internal:6379/0",
        ),
        (
            "rediss://:s3cret@cache.internal:6380/0?ssl_cert_reqs=none",
            "rediss://:***@cache.internal:6380/0?ssl_cert_reqs=none",
        ),
    ],
)
def test_redact_url_hides_the_password_and_keeps_the_rest(url, expected):
    redacted = redact_url(url)

    assert redacted == expected
    assert "s3cret" not in redacted and "p%40ss" not in redacted


@pytest.mark.parametrize(
    "url",
    [
        "mysql://root@127.0.0.1:3306/delayq_test",
        "redis://127.0.0.1:6379/12",
        "redis://cache.internal:6379/0?socket_timeout=5",
        "unix:///var/run/redis.sock",
        "sqlite:////var/lib/delayq/delayq.db",
    ],
)
def test_redact_url_leaves_a_url_without_a_password_exactly_as_it_was(url):
    assert redact_url(url) == url


def test_redact_url_of_no_url_says_embedded():
    assert redact_url(None) == "(embedded)"
    assert redact_url("") == "(embedded)"


def test_redact_url_keeps_the_brackets_of_an_ipv6_host():
    assert redact_url("redis://:s3cret@[::1]:6379/0") == "redis://:***@[::1]:6379/0"


def test_the_web_token_comes_from_the_environment_is_long_and_never_in_a_repr():
    token = "a-long-enough-web-token"
    settings = load_settings({"DELAYQ_WEB_TOKEN": token})

    assert settings.web_token == token
    assert token not in repr(settings)
    assert load_settings({}).web_token is None
    with pytest.raises(ConfigError, match="DELAYQ_WEB_TOKEN must be at least 16"):
        load_settings({"DELAYQ_WEB_TOKEN": "short  " + " " * 20})
