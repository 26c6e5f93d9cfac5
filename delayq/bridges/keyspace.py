"""The bridge `delayq listen` runs: timers another system keeps as Redis keys with a TTL,
watched through keyspace notifications (the seed systems 000 and 003), become delayq jobs, one
pending job per key (its `ext`), due when the key expires. The timers' Redis only tells; the
table keeps the job, so a restart or flush of that Redis after adoption loses nothing.
"""

from __future__ import annotations

import logging
import re
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import redis
from redis.client import PubSub

from ..base.durations import format_duration
from ..config import redact_url, validate_queue_name
from ..errors import BackendUnavailable, BadInput, ConfigError
from ..ops.overview import JobFilter
from ..queue import Queue
from ..store.backend_errors import one_line
from ..store.index import text
from ..store.table import Call, python_class
from ..store.urls import open_redis
from ..worker.allowlist import check_allowlist
from ..worker.handlers import locate

logger = logging.getLogger(__name__)

SETTING = "notify-keyspace-events"
# E: the __keyevent@DB__ channels; g: expire, del, rename, persist; $: set; x: expired.
NEEDED_FLAGS = "Eg$x"
ALL_CLASSES = "g$lshzxet"  # what the flag A stands for
GAINS_TTL = frozenset({"expire", "rename_to", "restore", "copy_to"})
# A SET sends `set` and, with EX or PX, `expire` next, which adopts; alone, the key lost its TTL.
MAY_LOSE_TTL = frozenset({"set", "persist"})
GONE = frozenset({"del", "rename_from"})
# Redis sends `expired` when it deletes the key, which its expiry sampling may do seconds after
# the TTL: a job for the key that fell due this recently is the one the event announces.
RECENTLY_DUE = 60.0
# A pending job due this close to the key's expiry is left as it is: the expiry is read as
# PTTL plus the clock, a few ms apart (more on a busy host, where 5 ms moved jobs of keys
# nobody touched); Redis itself fires `expired` up to 100 ms after the TTL.
UNMOVED = 0.05
SEED_GLOB = "*@*"  # seed 000's keys: Class@method@arg@...
RECONNECT_PAUSE = 1.0


@dataclass(frozen=True)
class Match:
    """One `--match GLOB=module.Class.method`: keys matching GLOB call that handler."""

    glob: str
    class_path: str
    method: str
    pattern: re.Pattern[str]

    @classmethod
    def parse(cls, option: str) -> Match:
        glob, equals, handler = option.rpartition("=")
        class_path, dot, method = handler.rpartition(".")
        if not (equals and glob and dot and class_path and method):
            raise BadInput(
                f"--match {option!r} must be GLOB=module.Class.method, "
                "e.g. 'send_message-*-*=shop.timers.Messages.send'"
            )
        return cls(glob, class_path, method, glob_pattern(glob))

    def call(self, key: str) -> Call | None:
        found = self.pattern.fullmatch(key)
        if found is None:
            return None
        return Call(self.class_path, self.method, {"key": key, "args": list(found.groups())})


# A glob's parts: `\x`, a set `[...]` (whose first character may be `]`), or one character.
_GLOB_PART = re.compile(r"\\(.)|\[(.[^\]]*)\]|.", re.DOTALL)


def glob_pattern(glob: str) -> re.Pattern[str]:
    """Redis's glob (`*`, `?`, `[a-z]`, `[^a]`, `\\x`) as a regular expression capturing what
    each `*` matched, so `send_message-*-*` gives the user id and the type."""

    def part(found: re.Match[str]) -> str:
        char, escaped, members = found.group(0, 1, 2)
        if escaped is not None:
            return re.escape(escaped)
        if members is not None:
            negated = members.startswith("^")
            members = re.escape(members[negated:]).replace("\\-", "-")
            return f"[{'^' if negated else ''}{members}]"
        return {"*": "(.*?)", "?": "."}.get(char) or re.escape(char)

    return re.compile(_GLOB_PART.sub(part, glob), re.DOTALL)


def seed_call(key: str, php_classes: dict[str, str]) -> Call | None:
    """Seed 000's `Class@method@arg@...`: the class mapped as DELAYQ_PHP_CLASSES says (or a
    Python dotted path), the args the @-separated rest; None for a key of another form."""
    class_name, _, rest = key.partition("@")
    method, _, args = rest.partition("@")
    if not class_name or not method:
        return None
    class_path = python_class(class_name, php_classes)
    return Call(class_path, method, {"key": key, "args": args.split("@") if args else []})


def enable_notifications(client: redis.Redis) -> None:
    """Add the flags the bridge needs to the server's keyspace events, keeping those set."""
    try:
        current = text(client.config_get(SETTING).get(SETTING) or "")
        covered = set(current) | (set(ALL_CLASSES) if "A" in current else set())
        if missing := "".join(flag for flag in NEEDED_FLAGS if flag not in covered):
            client.config_set(SETTING, current + missing)
    except redis.ResponseError as exc:  # CONFIG renamed away, or an ACL without it
        raise ConfigError(
            f"the timers' Redis refuses CONFIG ({one_line(exc)}); set {SETTING} to include "
            f"{NEEDED_FLAGS} in its configuration, or allow CONFIG"
        ) from None


class Bridge:
    """Keeps the jobs of one Redis database's timers in step with its keys."""

    def __init__(
        self, queue: Queue, timers: redis.Redis, url: str, matches: Sequence[Match], name: str
    ) -> None:
        self.queue, self.timers, self.url = queue, timers, url
        self.matches, self.queue_name = list(matches), name
        self.php_classes = dict(queue.settings.php_classes)
        self.database_number = int(timers.connection_pool.connection_kwargs.get("db") or 0)

    def call_for(self, key: str) -> Call | None:
        if not self.matches:
            return seed_call(key, self.php_classes)
        return next((call for match in self.matches if (call := match.call(key))), None)

    def handle(self, event: str, raw_key: bytes) -> bool:
        """Act on one keyspace event; whether a job was added or moved. A key naming no
        handler the allowlist admits is skipped with a warning: the next key may be fine."""
        try:
            key = raw_key.decode("utf-8")
            if (call := self.call_for(key)) is None:
                return False
            if event in GAINS_TTL:
                return self.adopt(key, call)
            if event == "expired":
                return self.fire(key, call)
            if event in GONE or (event in MAY_LOSE_TTL and self.timers.pttl(key) == -1):
                self.queue.cancel(ext=key, queue=self.queue_name)
        except UnicodeDecodeError:
            logger.warning("timer key %r skipped: it is not UTF-8 text", raw_key)
        except BadInput as exc:
            logger.warning("timer key %r skipped: %s", text(raw_key), exc)
        return False

    def adopt(self, key: str, call: Call) -> bool:
        """Add or move the key's job to the moment the key expires."""
        ttl = self.timers.pttl(key)
        if ttl == -2:
            return False  # gone already: its `del` or `expired` event follows
        if ttl == -1:  # SET without a TTL or PERSIST: the key no longer expires
            self.queue.cancel(ext=key, queue=self.queue_name)
            return False
        now, latest = self._latest(key)
        # A reconnect's SCAN finds most keys as they were: a read, not a write, for those.
        if not (
            latest["status"] == "pending" and abs(latest["run_at"] - now - ttl / 1000) < UNMOVED
        ):
            self._add(call, key, now + ttl / 1000, now)
        return True

    def fire(self, key: str, call: Call) -> bool:
        """The key expired: run its job now unless one is pending or fell due just now (the
        one this event announces, already run)."""
        now, latest = self._latest(key)
        if latest["status"] == "pending" or (
            latest["status"] not in ("cancelled", None) and latest["run_at"] >= now - RECENTLY_DUE
        ):
            return False
        self._add(call, key, now, now)
        return True

    def _latest(self, key: str) -> tuple[float, dict[str, Any]]:
        """Now, and the newest job for the key in the bridge's queue as `list --json` shows it
        ({"status": None} if there is none)."""
        now = self.queue.index.clock.now()  # before the query: adopt reads the TTL against it
        jobs = self.queue.list_jobs(JobFilter(ext=key, queue=self.queue_name), limit=1)
        return now, (jobs[0] if jobs else {"status": None})

    def _add(self, call: Call, key: str, run_at: float, now: float) -> None:
        self.queue.add(
            call.class_path,
            call.method,
            call.data,
            at=run_at,
            ext=key,
            queue=self.queue_name,
            replace=True,
            now=now,
        )

    def adopt_all(self) -> int:
        """SCAN for the keys the bridge watches and adopt those with a TTL; how many."""
        globs = [match.glob for match in self.matches] or [SEED_GLOB]
        return sum(
            self.handle("expire", key)
            for glob in globs
            for key in self.timers.scan_iter(match=glob, count=1000)
        )

    def subscribe(self) -> PubSub:
        """Turn the events on, subscribe, and wait until Redis confirms: events of keys
        set during the SCAN that follows then reach the bridge."""
        enable_notifications(self.timers)
        pubsub = self.timers.pubsub()
        pubsub.psubscribe(f"__keyevent@{self.database_number}__:*")
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            message = pubsub.get_message(timeout=1.0)
            if message is not None and message["type"] == "psubscribe":
                return pubsub
        pubsub.close()
        raise redis.TimeoutError("no confirmation of PSUBSCRIBE within 10 s")

    def pump(self, pubsub: PubSub) -> None:
        """Handle events until the connection fails."""
        while True:
            message = pubsub.get_message(timeout=1.0)
            if message is not None and message["type"] == "pmessage":
                event = text(message["channel"]).rpartition(":")[2]
                self.handle(event, message["data"])

    def serve(self, retry_for: float, on_ready: Callable[[int], Any]) -> None:
        """Subscribe, adopt, handle events; after a lost connection the same again. Raises
        BackendUnavailable once the timers' Redis has not answered for `retry_for` seconds."""
        down_since: float | None = None
        while True:
            try:
                with self.subscribe() as pubsub:
                    down_since = None
                    on_ready(self.adopt_all())
                    self.pump(pubsub)
            except (redis.ConnectionError, redis.TimeoutError) as exc:
                if down_since is None:  # one warning an outage, not one a second
                    down_since = time.monotonic()
                    logger.warning(
                        "the timers' Redis: %s; reconnecting for up to %s",
                        one_line(exc, self.url),
                        format_duration(retry_for),
                    )
                elif time.monotonic() - down_since >= retry_for:
                    raise BackendUnavailable(
                        f"the timers' Redis at {redact_url(self.url)} has not answered for "
                        f"{format_duration(retry_for)}: {one_line(exc, self.url)}"
                    ) from None
                time.sleep(RECONNECT_PAUSE)


def open_bridge(queue: Queue, url: str, matches: Sequence[Match], name: str) -> Bridge:
    """A Bridge from `--from URL` to `queue`, its handlers checked against the allowlist."""
    if url.partition("://")[0] not in ("redis", "rediss", "unix"):
        raise BadInput(
            f"--from {redact_url(url)!r}: use redis://host:6379/DB, rediss:// or unix://"
        )
    validate_queue_name(name)
    check_allowlist(queue.settings.handlers)
    for match in matches:
        locate(match.class_path, match.method, queue.settings.handlers)
    timers = open_redis(url, "--from", health_check_interval=10)
    return Bridge(queue, timers, url, matches, name)
