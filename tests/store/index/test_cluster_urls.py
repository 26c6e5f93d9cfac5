"""redis+cluster:// URLs: the one-line usage error (exit 2, no secret repeated, nothing
written) for one delayq cannot use, and the one-line error (exit 1) for a cluster nobody
answers at. No server is needed."""

from __future__ import annotations

import pytest

from delayq.cli import app
from delayq.store.index.clusters import CLUSTER_PORT
from delayq.store.index.sentinels import servers
from tests.cli.test_cli import assert_one_error_line, bare_env  # noqa: F401 - a fixture

BAD_URLS = {
    "database-number": ("redis+cluster://10.0.0.1:6379/0", "only database 0"),
    "database-number-after-slash": ("redis+cluster://10.0.0.1:6379/3", "only database 0"),
    "query-parameter": ("redis+cluster://10.0.0.1:6379?socket_timeout=1", "no query parameters"),
    "no-hosts": ("redis+cluster://", "host:port"),
    "empty-host-in-list": ("redis+cluster://10.0.0.1:6379,,10.0.0.2:6379", "host:port"),
    "port-zero": ("redis+cluster://10.0.0.1:0", "from 1 to 65535"),
    "port-out-of-range": ("redis+cluster://10.0.0.1:6379,10.0.0.2:70000", "from 1 to 65535"),
    "port-not-a-number": ("redis+cluster://10.0.0.1:abc", "from 1 to 65535"),
    "raw-slash-in-password": ("redis+cluster://:a/b@10.0.0.1:6379", "percent-encoded"),
}


@pytest.mark.parametrize(("url", "fragment"), BAD_URLS.values(), ids=BAD_URLS)
@pytest.mark.parametrize("command", [["status"], ["run"]], ids=["status", "run"])
def test_a_bad_cluster_url_is_a_usage_error_naming_the_variable(
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


def test_a_password_in_a_bad_cluster_url_is_not_repeated(
    bare_env,  # noqa: F811 - the fixture imported above
    monkeypatch,
    tmp_path,
):
    monkeypatch.setenv("DELAYQ_DATABASE_URL", f"sqlite:///{tmp_path / 'q.db'}")
    monkeypatch.setenv("DELAYQ_REDIS_URL", "redis+cluster://ann:s3cretpw@10.0.0.1:6379/1")

    result = bare_env.invoke(app, ["status"])

    assert_one_error_line(result, 2, "DELAYQ_REDIS_URL", "only database 0")
    assert "s3cretpw" not in result.output


def test_the_parts_of_a_cluster_url():
    nodes, username, password = servers(
        "ann:p%40ss@10.0.0.1:7000,[::1]:7001,node-3", CLUSTER_PORT, "nodes"
    )

    assert nodes == [("10.0.0.1", 7000), ("::1", 7001), ("node-3", 6379)]
    assert (username, password) == ("ann", "p@ss")


@pytest.mark.parametrize("command", [["status"], ["run"]], ids=["status", "run"])
def test_a_cluster_nobody_answers_at_is_one_error_line(
    bare_env,  # noqa: F811 - the fixture imported above
    monkeypatch,
    tmp_path,
    command,
):
    monkeypatch.setenv("DELAYQ_DATABASE_URL", f"sqlite:///{tmp_path / 'q.db'}")
    # Port 1 on loopback: nothing listens, so the connection is refused at once.
    monkeypatch.setenv("DELAYQ_REDIS_URL", "redis+cluster://127.0.0.1:1")

    result = bare_env.invoke(app, command)

    assert_one_error_line(result, 1, "Redis error")
