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
from typing import TypeVar, cast

import redis
from redis.client import Pipeline
from redis.cluster import RedisCluster
from redis.connection import Connection, ConnectionPool

from .clusters import is_cluster
from .keys import JOURNAL_TTL, queue_key, text

T = TypeVar("T")


class Journal:
    """The journals of every queue, on one Redis client."""

    def __init__(self, client: redis.Redis) -> None:
        self.client = client
        # The journal's connection on each server it writes to: one, or on a Cluster one on
        # each master holding a queue's hash slot; by id() of the connection pool.
        self._connections: dict[int, tuple[ConnectionPool, Connection]] = {}
        self._pools: dict[str, ConnectionPool] = {}  # the pool each queue's last write took
        self._lock = threading.Lock()
        self._cluster = is_cluster(client)

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
        """Write down, without waiting for Redis, that the pass with lease token `token`
        starts these jobs' handlers: with many jobs in flight no order tells which had
        started when the run died."""
        self._hset(queue, [(start_field(token, job_id), b"1") for job_id in job_ids])

    def _hset(self, queue: str, pairs: list[tuple[bytes, bytes]]) -> None:
        if pairs:
            packed = pack(b"HSET", journal_key(queue), *itertools.chain.from_iterable(pairs))
            self._send(queue, packed)

    def note_order(
        self, pipe: Pipeline, queue: str, token: str, order: Sequence[int], notes_starts: bool
    ) -> None:
        """Add to `pipe` the note of the order the pass with lease token `token` will call a
        batch in (see `orders`), or that it notes each job it starts (`note_starts`)."""
        key = journal_key(queue)
        if notes_starts:
            pipe.hset(key, f"starts:{token}", "1")
        if len(order) > 1:
            # If the run dies, recovery can tell the job that was running from the ones that
            # never started.
            pipe.hset(key, f"order:{token}", ",".join(map(str, order)))
            pipe.expire(key, JOURNAL_TTL)  # covers the outcomes journaled for this batch

    def close(self) -> None:
        """Turn replies back on and give the journal's connections back to their pools (at a
        drain's end); each one reply proves that Redis applied every journal write before."""
        with self._lock:
            held, self._connections = list(self._connections.values()), {}
            self._pools.clear()
        failed: Exception | None = None
        for pool, connection in held:
            try:
                connection.send_packed_command([pack(b"CLIENT", b"REPLY", b"ON")])
                connection.read_response()
            except Exception as exc:  # noqa: BLE001 - raised once every connection is back
                connection.disconnect()
                failed = failed or exc
            finally:
                pool.release(connection)
        if failed is not None:
            raise failed

    def _send(self, queue: str, packed: bytes) -> None:
        # The main thread journals while the bookkeeping thread commits: sends take turns.
        with self._lock:
            pool = self._pool_for(queue)
            before = self._pools.get(queue)
            if before is not None and before is not pool:
                self._give_up(before)  # the queue's hash slot moved to another master
            self._pools[queue] = pool
            held = self._connections.get(id(pool))
            # A Sentinel pool that found a new primary after a failover no longer owns a
            # connection still on the old server (which takes no writes, and answers none).
            if held is not None and not pool.owns_connection(held[1]):
                self._give_up(pool)
                held = None
            if held is None:
                self._connections[id(pool)] = pool, pool.get_connection()
                self._checked(pool, pack(b"CLIENT", b"REPLY", b"OFF"))
            self._checked(pool, packed)

    def _pool_for(self, queue: str) -> ConnectionPool:
        """The pool of the server that holds `queue`'s journal now."""
        if not self._cluster:
            return self.client.connection_pool
        cluster = cast(RedisCluster, self.client)
        node = cluster.get_node_from_key(journal_key(queue))
        return cast(ConnectionPool, cluster.get_redis_connection(node).connection_pool)

    def _checked(self, pool: ConnectionPool, packed: bytes) -> None:
        """Send on the journal's connection to `pool`'s server, giving it up if that fails:
        redis-py would reconnect it with replies on, and the replies no one reads would
        answer whoever takes it from the pool next (Redis restarted under a run: its next
        claim read a journal write's reply and crashed)."""
        try:
            self._connections[id(pool)][1].send_packed_command([packed], check_health=False)
        except Exception:
            self._give_up(pool)
            raise

    def _give_up(self, pool: ConnectionPool) -> None:
        held = self._connections.pop(id(pool), None)
        if held is not None:
            held[1].disconnect()
            pool.release(held[1])

    def forget(
        self,
        queue: str,
        job_ids: Sequence[int],
        started: tuple[str, Sequence[int]] | None,
        also: Sequence[tuple[str, ...]] = (),
    ) -> None:
        """Drop these jobs' outcomes and the start notes (lease token, ids) once the table has
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
            self._send(queue, b"".join(packed))

    def forget_order(self, queue: str, token: str) -> None:
        self.client.hdel(journal_key(queue), f"order:{token}", f"starts:{token}")

    def started(self, queue: str, token: str, job_ids: Sequence[int]) -> set[int] | None:
        """Those of `job_ids` whose start the pass with lease token `token` noted, or None if
        it noted no starts."""
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
    parts = [b"*%d\r\n" % len(args)]
    for arg in args:  # a loop, not a generator: this runs for every job
        parts += (b"$%d\r\n" % len(arg), arg, b"\r\n")
    return b"".join(parts)
