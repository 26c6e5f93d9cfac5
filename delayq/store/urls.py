"""Checks on the server URLs (DELAYQ_DATABASE_URL, DELAYQ_REDIS_URL) before anything
connects, so a malformed one is one usage error naming the variable, never a traceback
from deep inside a driver, and never an error that repeats a piece of the password.

database.py opens the database; `open_redis` here builds every Redis client delayq makes
for a URL (sentinels.py and clusters.py those of redis+sentinel:// and redis+cluster://).
"""

from __future__ import annotations

import re
from contextlib import suppress
from typing import Any
from urllib.parse import SplitResult, urlsplit

import redis

from ..config import hide_secrets, redact_url
from ..errors import ConfigError
from .index import clusters, sentinels

REDIS_SCHEMES = ("redis", "rediss", "unix", sentinels.SCHEME, clusters.SCHEME)
REDIS_FORMS = (
    "use redis://[:password@]host:6379/0, rediss://, unix://, "
    "redis+sentinel://[:password@]host:26379[,host:26379...]/SERVICE[/DB] or "
    "redis+cluster://[:password@]host:6379[,host:6379...]"
)
SERVER_SCHEMES = ("mysql", "redis", "rediss")
# A server that stops answering must not hold a run, or an add, for ever: a client gives up
# connecting after CONNECT_TIMEOUT seconds and waiting on a reply after COMMAND_TIMEOUT (the
# loop then tries again; docs/deploying.md). A URL's own socket_timeout=... wins.
CONNECT_TIMEOUT = 5.0
COMMAND_TIMEOUT = 30.0
PERCENT_ENCODE = (
    "a # ? / or @ in the password (or an @ anywhere after it) must be "
    "percent-encoded, e.g. urllib.parse.quote(password, safe='')"
)
_DB_PATH = re.compile(r"^/?(\d*)$")
_ARGUMENT = re.compile(r"keyword argument '(\w+)'")


def refuse(variable: str, url: str, reason: str) -> ConfigError:
    """The one-line error for a bad URL: the variable, the URL without secrets, the fix."""
    return ConfigError(hide_secrets(f"{variable} {redact_url(url)!r}: {reason}", url))


def split(variable: str, url: str) -> SplitResult:
    """The parts of `url`, or the usage error for one no parser can take apart."""
    try:
        return urlsplit(url)
    except ValueError:  # e.g. an unclosed [ of an IPv6 address
        raise refuse(variable, url, "not a URL delayq can read") from None


def check_netloc(variable: str, url: str) -> None:
    """Refuse a server URL whose user:password@host:port part a parser would misread.

    A raw # ? or / in a password ends that part early: the rest of the password becomes
    the port, the path or the query, and the host named after the @ is never reached.
    """
    parts = split(variable, url)
    if parts.scheme not in SERVER_SCHEMES:
        return
    _check_password(variable, url, parts.netloc)
    with suppress(ValueError):
        if parts.port != 0:
            return
    raise refuse(variable, url, "the port must be a number from 1 to 65535")


def _check_password(variable: str, url: str, netloc: str) -> None:
    """Refuse a URL whose parser ended user:password@host before the last @ a person meant:
    no @ in what it read, or (`root:p@ss#word@host`) a # or ? after what it read and before
    the last @, with no / between (a / there belongs to the path, and that @ to the query)."""
    rest = url.partition("://")[2]
    between = rest[len(netloc) : rest.rfind("@")]
    if "@" in rest and ("@" not in netloc or (between[:1] in ("#", "?") and "/" not in between)):
        raise refuse(variable, url, PERCENT_ENCODE)


def open_redis(url: str, variable: str = "DELAYQ_REDIS_URL", **options: Any) -> redis.Redis:
    """A client for `url` whose every part redis-py has already checked; connects lazily.
    `variable`: the setting or option its errors name."""
    options = {
        "socket_connect_timeout": CONNECT_TIMEOUT,
        "socket_timeout": COMMAND_TIMEOUT,
        **options,
    }
    parts = split(variable, url)
    scheme = parts.scheme
    if scheme not in REDIS_SCHEMES:
        raise refuse(variable, url, REDIS_FORMS)
    if scheme in (sentinels.SCHEME, clusters.SCHEME):  # several servers
        _check_password(variable, url, parts.netloc)
        opener = clusters.open_cluster if scheme == clusters.SCHEME else sentinels.open_sentinel
        try:
            return opener(parts.netloc, parts.path, parts.query, **options)
        except sentinels.BadUrl as exc:
            raise refuse(variable, url, str(exc)) from None
    check_netloc(variable, url)
    if scheme != "unix" and not _DB_PATH.match(parts.path):
        # redis-py would quietly use database 0 for /abc.
        raise refuse(variable, url, "the path must be a database number, e.g. /0")
    try:
        client = redis.Redis.from_url(url, **options)
        pool = client.connection_pool
        pool.connection_class(**pool.connection_kwargs)  # checks arguments, connects nothing
    except TypeError as exc:
        found = _ARGUMENT.search(str(exc))
        name = repr(found.group(1)) if found else "a parameter"
        raise refuse(variable, url, f"redis-py knows no {name}") from None
    except ValueError as exc:
        raise refuse(variable, url, str(exc)) from None
    return client


def check_mysql_arguments(url: str, kwargs: dict[str, Any]) -> None:
    """Let PyMySQL check the connection arguments without connecting."""
    import pymysql

    port = kwargs.get("port", 3306)
    if isinstance(port, bool) or not isinstance(port, int) or not 1 <= port <= 65535:
        raise refuse("DELAYQ_DATABASE_URL", url, "the port must be a number from 1 to 65535")
    try:
        # With TLS off, so the check builds no TLS context (tens of ms each cron run).
        pymysql.connect(defer_connect=True, **{**kwargs, "ssl_disabled": True})
    except TypeError as exc:
        found = _ARGUMENT.search(str(exc))
        reason = (
            f"PyMySQL knows no {found.group(1)!r}"
            if found
            else f"a parameter has the wrong type ({exc})"
        )
        raise refuse("DELAYQ_DATABASE_URL", url, reason) from None
    except ValueError as exc:
        raise refuse("DELAYQ_DATABASE_URL", url, str(exc)) from None
