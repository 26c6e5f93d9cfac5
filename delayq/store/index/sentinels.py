"""redis+sentinel:// URLs: the sentinels to ask, the service whose primary delayq talks to,
and a client on that primary that finds the new one after a failover.

urls.py sends such URLs here; what a failover may roll back is left to the table, the truth.
"""

from __future__ import annotations

import re
from typing import Any
from urllib.parse import parse_qsl, unquote

import redis
from redis.backoff import ExponentialBackoff
from redis.retry import Retry
from redis.sentinel import Sentinel, SentinelManagedConnection

SCHEME = "redis+sentinel"
SENTINEL_PORT = 26379
QUERY_PARAMETERS = ("sentinel_username", "sentinel_password")
# A failover with down-after-milliseconds 1000 promotes a replica within a few seconds;
# these tries (about 9 s of backoff, reconnecting and asking the sentinels each time) carry
# a command across it. Longer outages are the looping run's to wait out.
FAILOVER_RETRIES = 12
# A timeout is not retried: a primary that hangs would hold a command for socket_timeout
# on every try. It closes the connection, and the next command asks the sentinels anew.
RETRIED = (redis.ConnectionError,)
# A sentinel answers SENTINEL MASTERS at once; one that does not is skipped for the next.
SENTINEL_TIMEOUT = 2.0
_HOST = re.compile(r"^(\[[0-9A-Fa-f:.]+\]|[^:\[\]]+)(?::([^:]*))?$")


class PrimaryConnection(SentinelManagedConnection):
    """A connection that asks the sentinels for the primary whenever it reconnects.

    redis-py (8.1) reconnects a connection that broke in the middle of a command to the
    address it had, and its retries stay there: after a kill -9 of the primary a command
    (a run's BLPOP, its next write) retried the dead or demoted server for its whole budget
    and stalled the run for 10 s and more. connect() is the sentinel-aware way in.
    """

    def send_packed_command(self, command: Any, check_health: bool = True) -> None:
        if not self._sock:
            self.connect()
        super().send_packed_command(command, check_health)


class BadUrl(ValueError):
    """What is wrong with a redis+sentinel:// or redis+cluster:// URL, in words for its usage
    error."""


def _service_and_db(path: str) -> tuple[str, int]:
    service, _, db = path.strip("/").partition("/")
    if not service:
        raise BadUrl("name the service after the hosts, e.g. /mymaster or /mymaster/0")
    if db and not (db.isascii() and db.isdigit()):
        raise BadUrl("the path after the service must be a database number, e.g. /0")
    return unquote(service), int(db or 0)


def servers(
    netloc: str, default_port: int, what: str
) -> tuple[list[tuple[str, int]], str | None, str | None]:
    """The (host, port) of each of the comma-separated `what` (sentinels, nodes) of a URL's
    [[user]:password@]host:port[,host:port...], and its user name and password, if given."""
    userinfo, _, hosts = netloc.rpartition("@")
    user, colon, password = userinfo.partition(":")
    addresses = []
    for host in hosts.split(","):
        found = _HOST.match(host)
        if not found:
            raise BadUrl(f"give the {what} as host:port[,host:port...]")
        name, port = found.groups(str(default_port))
        if not (port.isascii() and port.isdigit()) or not 1 <= int(port) <= 65535:
            raise BadUrl(f"the port of {host!r} must be a number from 1 to 65535")
        addresses.append((name.strip("[]"), int(port)))
    return addresses, unquote(user) or None, unquote(password) if colon else None


def failover_retry(**supported_errors: Any) -> Retry:
    """The retry policy that carries a command across a failover."""
    return Retry(ExponentialBackoff(cap=1.0, base=0.05), FAILOVER_RETRIES, **supported_errors)


def _parameters(query: str) -> dict[str, str]:
    pairs = parse_qsl(query, keep_blank_values=True)
    if unknown := sorted({name for name, _ in pairs} - set(QUERY_PARAMETERS)):
        raise BadUrl(
            f"{SCHEME}:// knows no {unknown[0]!r}; it takes {' and '.join(QUERY_PARAMETERS)}"
        )
    if len(pairs) > len(dict(pairs)):
        raise BadUrl("give each query parameter once")
    return dict(pairs)


def open_sentinel(netloc: str, path: str, query: str, **options: Any) -> redis.Redis:
    """A client on the current primary of the service that the parts urlsplit gave of
    redis+sentinel://[[user]:password@]host:port[,host:port...]/SERVICE[/DB] name; connects
    lazily. BadUrl says what is wrong with the URL.

    redis-py's Sentinel pool asks the sentinels for the primary on every new connection and
    turns a READONLY reply (a demoted server) into a ConnectionError; the retry policy makes
    that, or a refused connection, reconnect to the primary the sentinels name now (without
    one the error reaches the caller).
    """
    service, db = _service_and_db(path)
    parameters = _parameters(query)
    addresses, username, password = servers(netloc, SENTINEL_PORT, "sentinels")
    timeouts = {
        name: min(float(options[name]), SENTINEL_TIMEOUT)
        for name in ("socket_connect_timeout", "socket_timeout")
        if options.get(name) is not None
    }
    sentinel = Sentinel(
        addresses,
        sentinel_kwargs={
            **timeouts,
            "username": parameters.get("sentinel_username"),
            "password": parameters.get("sentinel_password"),
        },
    )
    return sentinel.master_for(
        service,
        db=db,
        username=username,
        password=password,
        retry=failover_retry(supported_errors=RETRIED),
        connection_class=PrimaryConnection,
        **options,
    )
