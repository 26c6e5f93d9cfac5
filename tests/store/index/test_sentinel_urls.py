"""redis+sentinel:// URLs: what delayq reads from one, and the one-line usage error (exit 2,
no secret repeated) for one it cannot use. No server is needed: the client connects lazily."""

from __future__ import annotations

import pytest
from redis.sentinel import SentinelConnectionPool

from delayq.cli import app
from delayq.config import redact_url
from delayq.store.urls import open_redis
from tests.cli.test_cli import assert_one_error_line, bare_env  # noqa: F401 - a fixture

BAD_URLS = {
    "no-service": ("redis+sentinel://10.0.0.1:26379", "name the service"),
    "no-service-after-slash": ("redis+sentinel://10.0.0.1:26379/", "name the service"),
    "database-not-a-number": ("redis+sentinel://10.0.0.1:26379/svc/x", "database number"),
    "database-not-ascii-digits": ("redis+sentinel://10.0.0.1:26379/svc/²", "database number"),
    "more-path": ("redis+sentinel://10.0.0.1:26379/svc/0/1", "database number"),
    "no-hosts": ("redis+sentinel:///svc", "host:port"),
    "empty-host-in-list": ("redis+sentinel://10.0.0.1:26379,,10.0.0.2:26379/svc", "host:port"),
    "port-zero": ("redis+sentinel://10.0.0.1:0/svc", "from 1 to 65535"),
    "port-out-of-range": ("redis+sentinel://10.0.0.1:26379,10.0.0.2:70000/svc", "from 1 to 65535"),
    "port-not-a-number": ("redis+sentinel://10.0.0.1:abc/svc", "from 1 to 65535"),
    "unknown-parameter": ("redis+sentinel://10.0.0.1:26379/svc?socket_timeout=1", "knows no"),
    "parameter-twice": (
        "redis+sentinel://10.0.0.1/svc?sentinel_password=a1&sentinel_password=b2",
        "once",
    ),
    "raw-slash-in-password": ("redis+sentinel://:a/b@10.0.0.1:26379/svc", "percent-encoded"),
}


@pytest.mark.parametrize(("url", "fragment"), BAD_URLS.values(), ids=BAD_URLS)
@pytest.mark.parametrize("command", [["status"], ["run"]], ids=["status", "run"])
def test_a_bad_sentinel_url_is_a_usage_error_naming_the_variable(
    bare_env,  # noqa: F811 - the fixture imported above
    monkeypatch,
    tmp_path,
    url,
    fragment,
    command,
):
    monkeypatch.setenv("DELAYQ_DATABASE_URL", f"sqlite:///{tmp_path / 'q.db'}")
    monkeypatch.setenv("DELAYQ_REDIS_URL", url)

    result = bare_env.invoke(app, command)

    assert_one_error_line(result, 2, "DELAYQ_REDIS_URL", fragment)
    assert not (tmp_path / "q.db").exists()


def test_an_unknown_scheme_names_the_sentinel_form(bare_env, monkeypatch, tmp_path):  # noqa: F811
    monkeypatch.setenv("DELAYQ_DATABASE_URL", f"sqlite:///{tmp_path / 'q.db'}")
    monkeypatch.setenv("DELAYQ_REDIS_URL", "sentinel://10.0.0.1:26379/svc")

    result = bare_env.invoke(app, ["status"])

    assert_one_error_line(result, 2, "DELAYQ_REDIS_URL", "redis+sentinel://")


def test_the_error_for_a_bad_sentinel_url_repeats_no_password(bare_env, monkeypatch, tmp_path):  # noqa: F811
    url = "redis+sentinel://:data-s3cret@10.0.0.1:26379/svc?sentinel_password=sent-s3cret&x=1"
    monkeypatch.setenv("DELAYQ_DATABASE_URL", f"sqlite:///{tmp_path / 'q.db'}")
    monkeypatch.setenv("DELAYQ_REDIS_URL", url)

    result = bare_env.invoke(app, ["status"])

    assert_one_error_line(result, 2, "DELAYQ_REDIS_URL", "knows no 'x'")
    assert "s3cret" not in result.stderr


def test_redact_url_hides_both_passwords_of_a_sentinel_url():
    url = "redis+sentinel://app:data-pw@h1:26379,h2:26379/svc/2?sentinel_password=sent-pw"

    assert redact_url(url) == (
        "redis+sentinel://app:***@h1:26379,h2:26379/svc/2?sentinel_password=***"
    )


def test_a_sentinel_url_names_the_sentinels_the_service_the_database_and_both_passwords():
    url = (
        "redis+sentinel://app:p%40ss@10.0.0.1:26380,[::1],sentinel.internal:26381/my%20svc/3"
        "?sentinel_username=watcher&sentinel_password=w%26tch"
    )

    client = open_redis(url)

    pool = client.connection_pool
    assert isinstance(pool, SentinelConnectionPool)
    assert pool.service_name == "my svc"
    kwargs = pool.connection_kwargs
    assert (kwargs["db"], kwargs["username"], kwargs["password"]) == (3, "app", "p@ss")
    assert kwargs["socket_timeout"] == 30
    sentinels = [
        sentinel.connection_pool.connection_kwargs for sentinel in pool.sentinel_manager.sentinels
    ]
    assert [(each["host"], each["port"]) for each in sentinels] == [
        ("10.0.0.1", 26380),
        ("::1", 26379),
        ("sentinel.internal", 26381),
    ]
    assert {(each["username"], each["password"]) for each in sentinels} == {("watcher", "w&tch")}
    # A primary that went away is looked for again: a pool of master_for retries 0 times
    # unless given a policy.
    assert vars(pool.make_connection().retry)["_retries"] > 0  # no get_retries() in redis 5.3
