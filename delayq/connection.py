"""connect(): a Queue on the configured database and Redis, or on the embedded default (a
SQLite file and a private redis-server under DELAYQ_HOME) for whichever is not configured;
connect_async(): the same Queue behind coroutines."""

from __future__ import annotations

from typing import Any

import redis

from .async_queue import AsyncQueue
from .config import Settings, load_settings
from .errors import BackendUnavailable
from .queue import Queue
from .store import embedded
from .store.backend_errors import one_line
from .store.database import open_database, sqlite_url
from .store.index import Index
from .store.urls import open_redis


def connect(settings: Settings | None = None, **overrides: Any) -> Queue:
    """A Queue from `settings` (default: the environment and config file) plus overrides,
    e.g. connect(database_url=..., redis_url=..., handlers=[...])."""
    settings = (settings or load_settings()).with_overrides(**overrides)
    database_url = settings.database_url or sqlite_url(embedded.database_file(settings.home))
    db = open_database(database_url)
    if settings.redis_url:
        try:
            client = open_redis(settings.redis_url)
        except redis.RedisError as exc:  # a Cluster's client asks its nodes for the slots now
            raise BackendUnavailable(f"Redis error: {one_line(exc, settings.redis_url)}") from exc
    else:
        client = embedded.open_client(settings.home, settings.embedded_idle)
    return Queue(settings, db, Index(client))


def connect_async(settings: Settings | None = None, **overrides: Any) -> AsyncQueue:
    """An AsyncQueue on what connect() with these arguments opens; the settings are checked
    now, the servers reached by its first call, off the event loop."""
    return AsyncQueue((settings or load_settings()).with_overrides(**overrides), connect)
