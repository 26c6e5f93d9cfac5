"""redis+cluster:// URLs: seed nodes of a Redis Cluster, and a client that routes each
command to the master holding its key's hash slot and follows MOVED, ASK and failovers.

Every script delayq runs touches one queue's keys, which share the queue's hash slot
(keys.py); the global keys are only ever read or written one at a time. What differs from
one server is handled where it differs: scripts are not pipelined (schedule.py), a run on
queues in several hash slots waits for wake-ups on each master (schedule.py), and the journal
keeps a connection to each queue's master (journal.py).
"""

from __future__ import annotations

import queue
import threading
import time
from collections.abc import Sequence
from typing import Any, cast

import redis
from redis.cluster import ClusterNode, RedisCluster
from redis.crc import key_slot
from redis.exceptions import RedisClusterException

from ...base.threads import keep_signals_off_this_thread
from .sentinels import BadUrl, failover_retry, servers

SCHEME = "redis+cluster"
CLUSTER_PORT = 6379


def open_cluster(netloc: str, path: str, query: str, **options: Any) -> redis.Redis:
    """A client on the cluster whose seed nodes the parts urlsplit gave of
    redis+cluster://[[user]:password@]host:port[,host:port...] name (BadUrl says what is
    wrong with them); connects at once, to learn the hash slots (redis-py asks the seeds for the
    topology when the client is made).

    The retry policy carries a command across a master's failover: a refused connection
    or CLUSTERDOWN makes redis-py ask for the topology again and retry on the new master.
    The client is typed as a Redis: it answers every command delayq sends, and the places
    that must differ ask `is_cluster`.
    """
    if path.strip("/"):
        raise BadUrl("a Cluster has only database 0: end the URL after the nodes")
    if query:
        raise BadUrl(f"{SCHEME}:// takes no query parameters")
    nodes, username, password = servers(netloc, CLUSTER_PORT, "nodes")
    try:
        client = RedisCluster(
            startup_nodes=[ClusterNode(host, port) for host, port in nodes],
            username=username,
            password=password,
            retry=failover_retry(),
            **options,
        )
    except RedisClusterException as exc:
        # Not a RedisError: said as one, it is the one-line Redis error every command gives.
        raise redis.ConnectionError(str(exc)) from None
    return cast(redis.Redis, client)


def is_cluster(client: object) -> bool:
    return isinstance(client, RedisCluster)


class HashSlotWaits:
    """Waiting for a wake-up on lists in several hash slots of a Cluster, where one BLPOP
    takes the keys of one hash slot only: a BLPOP a hash slot, each on a thread of its own,
    and the first reply ends the wait. A BLPOP still blocked when a wait ends stays, and the
    next wait reads its reply, so a wake-up it pops after all is not lost."""

    def __init__(self, client: redis.Redis) -> None:
        self.client = client
        self._blocked: set[tuple[str, ...]] = set()  # the hash slots' key groups with a BLPOP out
        self._replies: queue.SimpleQueue[tuple[tuple[str, ...], object]] = queue.SimpleQueue()

    def wait(self, keys: Sequence[str], timeout: float) -> bool:
        """Whether a wake-up came on one of `keys` within `timeout` seconds."""
        by_hash_slot: dict[int, list[str]] = {}
        for key in keys:
            by_hash_slot.setdefault(key_slot(key.encode()), []).append(key)
        if len(by_hash_slot) == 1:
            return self.client.blpop(keys, timeout=timeout) is not None
        deadline = time.monotonic() + timeout
        while True:
            for group in map(tuple, by_hash_slot.values()):
                if group not in self._blocked:
                    self._blocked.add(group)
                    remaining = max(deadline - time.monotonic(), 0.001)
                    threading.Thread(
                        target=self._blpop, args=(group, remaining), name="delayq-wake", daemon=True
                    ).start()
            try:
                group, reply = self._replies.get(timeout=max(deadline - time.monotonic(), 0.0))
            except queue.Empty:
                return False
            self._blocked.discard(group)
            if isinstance(reply, Exception):
                raise reply
            if reply is not None:
                return True
            if time.monotonic() >= deadline:
                return False

    def _blpop(self, keys: tuple[str, ...], timeout: float) -> None:
        keep_signals_off_this_thread()  # a SIGTERM meant to stop the loop wakes its main thread
        try:
            reply: object = self.client.blpop(list(keys), timeout=timeout)
        except Exception as exc:  # noqa: BLE001 - handed to the wait, which raises it
            reply = exc
        self._replies.put((keys, reply))
