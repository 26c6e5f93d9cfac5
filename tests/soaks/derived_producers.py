"""The derived-state soak's producers (tests/soaks/derived_soak.py): long-lived, one thread each,
adding to a queue of their own the way applications do, and the ledger of what each was
told (ids, errors, rollbacks) that the checks compare with the table and the handlers' log.

Queues: `plain` (add), `batch` (add_many), `txn` (add(using=) inside PyMySQL transactions,
a fifth rolled back), `foreign` (a raw INSERT, then ZADD; SADD delay_queue_queues once at its
start, as an older producer does), `locked` (lock= on four keys, handlers of 0.1-0.4 s),
`rated` (bursts into a queue limited to RATE a second), `debounce` (replace=True on six
keys) and `sparse` (one job now and then, so the queue is empty most of the time).
"""

from __future__ import annotations

import json
import random
import threading
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import pymysql
import redis
from redis.sentinel import Sentinel

import delayq
from delayq.config import Settings
from delayq.store.index.keys import schedule_key
from tests.conftest import mysql_connect
from tests.support.sentinels import SERVICE

HANDLER = ("tests.sample_handlers.derived", "work")
QUEUES = ("plain", "batch", "txn", "foreign", "locked", "rated", "debounce", "sparse")
RATE = 5  # job starts a second the `rated` queue is limited to
LOCK_KEYS = 4
DEBOUNCE_KEYS = 6
FAR_SHARE = 0.08  # jobs due beyond the horizon from their add: horizon walks bring them in
NEAR = 120.0  # seconds: the latest a near job is due after its add


@dataclass
class Plan:
    """When jobs fall due: near ones 1 s to `near` after their add (NEAR, or half the window
    when shorter), producers adding until `near` before `end`, so the last is due by then;
    far ones the horizon plus 1 to 5 minutes after their add (beyond `end` too: those must
    not run in the soak)."""

    end: float  # epoch seconds: the last near job is due by then
    near: float
    horizon: float
    log: str
    far: set[str] = field(default_factory=set)  # tags of the far jobs

    def due(self, now: float, tag: str, far_share: float = FAR_SHARE) -> float:
        if random.random() < far_share:
            self.far.add(tag)
            return now + self.horizon + random.uniform(60, 300)
        return now + random.uniform(1.0, self.near)

    def data(self, tag: str, seconds: float = 0.0) -> dict[str, Any]:
        return {"log": self.log, "tag": tag, "seconds": seconds}


@dataclass
class Ledger:
    """What the producers were told, shared by their threads."""

    ids: dict[str, int] = field(default_factory=dict)  # tag -> id an add returned
    failed: dict[str, str] = field(default_factory=dict)  # tag -> error of an add that raised
    rolled_back: set[str] = field(default_factory=set)  # tags added in a rolled-back transaction
    unknown: set[str] = field(default_factory=set)  # tags whose commit raised: either way
    replaces: list[tuple[str, str, int | None]] = field(default_factory=list)  # key, tag, id
    zadds_failed: int = 0  # the foreign producer's ZADDs that raised (its rows wait for a sweep)
    errors: Counter[str] = field(default_factory=Counter)  # by producer and message
    lock: threading.Lock = field(default_factory=threading.Lock)

    def note_error(self, producer: str, exc: BaseException) -> None:
        with self.lock:
            self.errors[f"{producer}: {type(exc).__name__}: {str(exc)[:160]}"] += 1


@dataclass
class Producers:
    plan: Plan
    ledger: Ledger
    settings: Settings
    database_url: str
    sentinels: list[tuple[str, int]]
    stopping: threading.Event = field(default_factory=threading.Event)
    threads: list[threading.Thread] = field(default_factory=list)
    counter: Counter[str] = field(default_factory=Counter)

    def start(self) -> None:
        loops: list[tuple[str, Callable[[], None]]] = [
            ("plain", self.plain),
            ("batch", self.batch),
            ("txn", self.txn),
            ("foreign", self.foreign),
            ("locked", self.locked),
            ("rated", self.rated),
            ("debounce", self.debounce),
            ("sparse", self.sparse),
        ]
        for name, loop in loops:
            thread = threading.Thread(target=self._guarded, args=(name, loop), name=name)
            thread.start()
            self.threads.append(thread)

    def stop(self) -> None:
        self.stopping.set()
        for thread in self.threads:
            thread.join(timeout=60)

    def _guarded(self, name: str, loop: Callable[[], None]) -> None:
        try:
            loop()
        except BaseException as exc:  # a producer that dies is the soak's failure, noted
            self.ledger.note_error(f"{name} died", exc)
            raise

    def _tag(self, queue: str) -> str:
        self.counter[queue] += 1
        return f"{queue}:{self.counter[queue]}"

    def _adding(self, pause: tuple[float, float]) -> bool:
        """Wait a random pause; whether to go on adding (the window is not over)."""
        if self.stopping.wait(random.uniform(*pause)):
            return False
        return time.time() < self.plan.end - self.plan.near

    def _queue(self) -> delayq.Queue:
        return delayq.connect(self.settings)

    def _add(self, producer: delayq.Queue, name: str, tag: str, **options: Any) -> None:
        seconds = options.pop("seconds", 0.0)
        try:
            job_id = producer.add(*HANDLER, self.plan.data(tag, seconds), ext=tag, **options)
        except delayq.BackendUnavailable as exc:
            self.ledger.failed[tag] = str(exc)
            self.ledger.note_error(name, exc)
        else:
            self.ledger.ids[tag] = job_id

    def plain(self) -> None:
        queue = self._queue()
        while self._adding((0.15, 0.35)):
            tag = self._tag("plain")
            self._add(queue, "plain", tag, at=self.plan.due(time.time(), tag), queue="plain")
        queue.close()

    def batch(self) -> None:
        queue = self._queue()
        while self._adding((1.5, 2.5)):
            tags = [self._tag("batch") for _ in range(random.randint(5, 15))]
            now = time.time()
            data = [(tag, self.plan.data(tag), self.plan.due(now, tag)) for tag in tags]
            specs = [
                delayq.JobSpec(*HANDLER, each, at=at, ext=tag, queue="batch")
                for tag, each, at in data
            ]
            self._add_many(queue, "batch", tags, specs)
        queue.close()

    def _add_many(
        self, queue: delayq.Queue, name: str, tags: list[str], specs: list[delayq.JobSpec]
    ) -> None:
        """`add_many` of `specs`, noted in the ledger by their `tags`: their ids, or that the
        add raised (then none of them may have a row)."""
        try:
            ids = queue.add_many(specs)
        except delayq.BackendUnavailable as exc:
            self.ledger.failed.update(dict.fromkeys(tags, str(exc)))
            self.ledger.note_error(name, exc)
        else:
            self.ledger.ids.update(zip(tags, ids, strict=True))

    def txn(self) -> None:
        """An order and its jobs in one PyMySQL transaction; a fifth of them rolled back."""
        queue = self._queue()
        conn = mysql_connect(self.database_url)
        conn.autocommit(False)
        while self._adding((0.3, 0.7)):
            tags = [self._tag("txn") for _ in range(random.randint(1, 2))]
            self._one_transaction(queue, conn, tags)
        conn.close()
        queue.close()

    def _one_transaction(
        self, queue: delayq.Queue, conn: pymysql.Connection, tags: list[str]
    ) -> None:
        roll_back = random.random() < 0.2
        try:
            conn.begin()
            with conn.cursor() as cursor:
                cursor.execute("INSERT INTO dsoak_orders (note) VALUES (%s)", (tags[0],))
            ids = [
                queue.add(
                    *HANDLER,
                    self.plan.data(tag),
                    at=self.plan.due(time.time(), tag),
                    ext=tag,
                    queue="txn",
                    using=conn,
                )
                for tag in tags
            ]
        except (delayq.BackendUnavailable, pymysql.MySQLError) as exc:
            self.ledger.note_error("txn", exc)
            roll_back, ids = True, []
        if roll_back:
            conn.rollback()
            self.ledger.rolled_back.update(tags)
            return
        try:
            conn.commit()
        except pymysql.MySQLError as exc:
            self.ledger.note_error("txn commit", exc)
            self.ledger.unknown.update(tags)
            return
        self.ledger.ids.update(zip(tags, ids, strict=True))

    def foreign(self) -> None:
        """What a producer in another language writes: the row, then the schedule's entry
        (every job, whatever its due time, as before the horizon); the queue noted in the
        registry once, at its start."""
        conn = mysql_connect(self.database_url)
        client = Sentinel(self.sentinels, socket_timeout=2).master_for(SERVICE, socket_timeout=2)
        client.sadd("delay_queue_queues", "foreign")
        while self._adding((0.3, 0.7)):
            tag = self._tag("foreign")
            at = round(self.plan.due(time.time(), tag), 3)
            params = json.dumps(
                {"class": HANDLER[0], "method": HANDLER[1], "data": self.plan.data(tag)}
            )
            with conn.cursor() as cursor:
                cursor.execute(
                    "INSERT INTO delay_queue (params, ext_string, run_at, queue)"
                    " VALUES (%s, %s, %s, 'foreign')",
                    (params, tag, at),
                )
                job_id = int(cursor.lastrowid)
            self.ledger.ids[tag] = job_id
            try:
                client.zadd(schedule_key("foreign"), {str(job_id): at})
            except redis.RedisError as exc:
                self.ledger.note_error("foreign ZADD", exc)
                with self.ledger.lock:
                    self.ledger.zadds_failed += 1
        client.close()
        conn.close()

    def locked(self) -> None:
        queue = self._queue()
        while self._adding((0.5, 0.9)):
            tag = self._tag("locked")
            key = f"acct:{random.randrange(LOCK_KEYS)}"
            at = self.plan.due(time.time(), tag)
            seconds = random.uniform(0.1, 0.4)
            self._add(queue, "locked", tag, at=at, queue="locked", lock=key, seconds=seconds)
        queue.close()

    def rated(self) -> None:
        """Bursts of 20 to 40 jobs due at one time: backlogs of 4 to 8 s at RATE a second."""
        queue = self._queue()
        while self._adding((8.0, 12.0)):
            tags = [self._tag("rated") for _ in range(random.randint(20, 40))]
            at = self.plan.due(time.time(), tags[0], far_share=0.0)
            specs = [
                delayq.JobSpec(*HANDLER, self.plan.data(tag), at=at, ext=tag, queue="rated")
                for tag in tags
            ]
            self._add_many(queue, "rated", tags, specs)
        queue.close()

    def debounce(self) -> None:
        """Move a key's pending job 2 to 20 s ahead, again and again: only the last version
        written to a row may run. A replace that raised is noted with no id."""
        queue = self._queue()
        while self._adding((0.3, 0.7)):
            key = f"key:{random.randrange(DEBOUNCE_KEYS)}"
            tag = self._tag("debounce")
            at = time.time() + random.uniform(2, 20)
            try:
                job_id: int | None = queue.add(
                    *HANDLER, self.plan.data(tag), at=at, ext=key, queue="debounce", replace=True
                )
            except delayq.BackendUnavailable as exc:
                self.ledger.note_error("debounce", exc)
                job_id = None
            with self.ledger.lock:
                self.ledger.replaces.append((key, tag, job_id))
        queue.close()

    def sparse(self) -> None:
        """One job every 20 to 60 s, due within 10 s: the queue has no pending row most of the
        time, so a Redis loss finds it in no registry and with no horizon."""
        queue = self._queue()
        while self._adding((20.0, 60.0)):
            tag = self._tag("sparse")
            self._add(queue, "sparse", tag, at=time.time() + random.uniform(1, 10), queue="sparse")
        queue.close()
