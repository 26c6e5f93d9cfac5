"""The journal: each queue's Redis hash where a run writes down what it did before the table
has it (each outcome, with many jobs in flight each start) and notes the order it calls a
batch in, so that the run after a crash records what was done and re-runs only what was
running. Writes go out on a connection of their own that gets no replies (see `write_many`).
"""

from __future__ import annotations

import itertools
import threading
from collections.abc import Sequence
from functools import lru_cache
from typing import TypeVar

import redis
from redis.client import Pipeline
from redis.connection import Connection

from .keys import JOURNAL_TTL, queue_key, text

T = TypeVar("T")


class Journal:
    """The journals of every queue, on one Redis client."""

    def __init__(self, client: redis.Redis) -> None:
        self.client = client
        self._connection: Connection | None = None
        self._lock = threading.Lock()

    def write(self, queue: str, job_id: int, record: str) -> None:
        self.write_many(queue, [(job_id, record)])

    def write_many(self, queue: str, records: Sequence[tuple[int, str]]) -> None:
        """Write down outcomes (job id, record) before the table has them, in one HSET,
        without waiting for Redis.

        Sent on a connection of its own with CLIENT REPLY OFF: with nothing ever left unread
        on it, a process killed right after still has it delivered, as the kernel closes the
        socket with a FIN after the data (a socket closed with unread replies is reset, and
        Redis drops what it had not read: journal writes went missing that way). So the
        journal covers kill -9 at the cost of a write(2), not a round trip. `note_order`
        refreshes the expiry once per batch.
        """
        self._hset(queue, [(b"%d" % job_id, record.encode()) for job_id, record in records])

    def note_starts(self, queue: str, token: str, job_ids: Sequence[int]) -> None:
        """Write down, without waiting for Redis, that run `token` starts these jobs' handlers:
        with many jobs in flight no order tells which had started when the run died."""
        self._hset(queue, [(start_field(token, job_id), b"1") for job_id in job_ids])

    def _hset(self, queue: str, pairs: list[tuple[bytes, bytes]]) -> None:
        if pairs:
            self._send(pack(b"HSET", journal_key(queue), *itertools.chain.from_iterable(pairs)))

    def note_order(
        self, pipe: Pipeline, queue: str, token: str, order: Sequence[int], notes_starts: bool
    ) -> None:
        """Add to `pipe` the note of the order run `token` will call a batch in (see
        `orders`), or that it notes each job it starts (`note_starts`)."""
        key = journal_key(queue)
        if notes_starts:
            pipe.hset(key, f"starts:{token}", "1")
        if len(order) > 1:
            # If the run dies, recovery can tell the job that was running from the ones that
            # never started.
            pipe.hset(key, f"order:{token}", ",".join(map(str, order)))
            pipe.expire(key, JOURNAL_TTL)  # covers the outcomes journaled for this batch

    def close(self) -> None:
        """Turn replies back on and give the journal's connection back to the pool (at a
        drain's end); its one reply proves that Redis applied every journal write before."""
        with self._lock:
            connection, self._connection = self._connection, None
        if connection is None:
            return
        try:
            connection.send_packed_command([pack(b"CLIENT", b"REPLY", b"ON")])
            connection.read_response()
        except Exception:
            connection.disconnect()
            raise
        finally:
            self.client.connection_pool.release(connection)

    def _send(self, packed: bytes) -> None:
        # The main thread journals while the bookkeeping thread commits: sends take turns.
        with self._lock:
            # A Sentinel pool that found a new primary after a failover no longer owns a
            # connection still on the old server (which takes no writes, and answers none).
            pool = self.client.connection_pool
            if self._connection is not None and not pool.owns_connection(self._connection):
                self._give_up()
            if self._connection is None:
                self._connection = pool.get_connection()
                self._checked(pack(b"CLIENT", b"REPLY", b"OFF"))
            self._checked(packed)

    def _checked(self, packed: bytes) -> None:
        """Send on the journal's connection, giving it up if that fails: redis-py would
        reconnect it with replies on, and the replies no one reads would answer whoever takes
        it from the pool next (Redis restarted under a run: its next claim read a journal
        write's reply and crashed)."""
        assert self._connection is not None
        try:
            self._connection.send_packed_command([packed], check_health=False)
        except Exception:
            self._give_up()
            raise

    def _give_up(self) -> None:
        assert self._connection is not None
        connection, self._connection = self._connection, None
        connection.disconnect()
        self.client.connection_pool.release(connection)

    def forget(
        self,
        queue: str,
        job_ids: Sequence[int],
        started: tuple[str, Sequence[int]] | None,
        also: Sequence[tuple[str, ...]] = (),
    ) -> None:
        """Drop these jobs' outcomes and the start notes (run token, ids) once the table has
        them, and send the commands `also` in the same write (the tallies of those outcomes:
        no round trip of their own). Sent on the journal's own connection, Redis applies it
        after every HSET sent before it: a late HSET can never re-add what this removes."""
        fields = [b"%d" % job_id for job_id in job_ids]
        if started is not None:
            fields += [start_field(started[0], job_id) for job_id in started[1]]
        packed = [pack(*(arg.encode() for arg in command)) for command in also]
        if fields:
            packed.insert(0, pack(b"HDEL", journal_key(queue), *fields))
        if packed:
            self._send(b"".join(packed))

    def forget_order(self, queue: str, token: str) -> None:
        self.client.hdel(journal_key(queue), f"order:{token}", f"starts:{token}")

    def started(self, queue: str, token: str, job_ids: Sequence[int]) -> set[int] | None:
        """Those of `job_ids` whose start run `token` noted, or None if it noted no starts."""
        pipe = self.client.pipeline(transaction=False)
        pipe.hexists(journal_key(queue), f"starts:{token}")
        pipe.hmget(journal_key(queue), [start_field(token, job_id) for job_id in job_ids])
        notes, marks = pipe.execute()
        if not notes:
            return None
        return {job_id for job_id, mark in zip(job_ids, marks, strict=True) if mark is not None}

    def orders(self, queue: str, tokens: Sequence[str]) -> dict[str, list[int]]:
        """The noted batch order of each of these runs that has one."""
        found = self._values(queue, tokens, [f"order:{token}" for token in tokens])
        return {
            token: [int(part) for part in value.split(",") if part]
            for token, value in found.items()
        }

    def fields(self, queue: str) -> list[str]:
        """Every field of a queue's journal: outcomes by job id, and runs' notes."""
        return [text(field) for field in self.client.hkeys(journal_key(queue))]

    def journaled(self, queue: str, job_ids: Sequence[int]) -> dict[int, str]:
        """The journaled outcomes of those of `job_ids` that have one."""
        return self._values(queue, job_ids, [str(job_id) for job_id in job_ids])

    def _values(self, queue: str, names: Sequence[T], fields: list[str]) -> dict[T, str]:
        """{name: value} of the journal's `fields` (one per name) that exist."""
        if not fields:
            return {}
        values = self.client.hmget(journal_key(queue), fields)
        return {name: text(v) for name, v in zip(names, values, strict=True) if v is not None}


# Called for every journal write: the few queues a run meets are named once each.
@lru_cache(maxsize=256)
def journal_key(queue: str) -> bytes:
    return queue_key(queue, "journal").encode()


def start_field(token: str, job_id: int) -> bytes:
    return b"start:%s:%d" % (token.encode(), job_id)


def pack(*args: bytes) -> bytes:
    """One RESP command: an array of bulk strings."""
    return b"*%d\r\n" % len(args) + b"".join(b"$%d\r\n%s\r\n" % (len(arg), arg) for arg in args)
