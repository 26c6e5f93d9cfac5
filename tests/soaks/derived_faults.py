"""The derived-state soak's faults (tests/soaks/derived_soak.py), on its Sentinel group: FLUSHALL,
the primary restarted empty, SENTINEL FAILOVER, and on request the primary restarted from an
older snapshot; each waits until both replicas are in sync with the primary again."""

from __future__ import annotations

import contextlib
import time
from dataclasses import dataclass

import redis

from tests.support.sentinels import SentinelGroup
from tests.support.waiting import wait_for

KINDS = ("flushall", "restart-empty", "sentinel-failover")
# Not drawn unless named in --faults: the primary restarted from a snapshot --stale-age old,
# as a Redis saving snapshots now and then comes back from a crash (docs/guarantees.md).
STALE = "restart-stale"


@dataclass
class Fault:
    kind: str
    at: float
    settled: float  # seconds until the replicas were in sync again
    note: str = ""


def inject(group: SentinelGroup, kind: str, stale_age: float) -> Fault:
    old = group.primary_port()
    if kind == STALE:
        snapshot(group, old)
        time.sleep(stale_age)
    at = time.time()
    note = ""
    if kind == "flushall":
        client = group.client(old)
        with contextlib.closing(client):
            client.flushall()
    elif kind == "restart-empty":
        loaded = keys_loaded(group, group.restart_primary(empty=True))
        if loaded:  # not what this fault is: the soak's failure
            raise AssertionError(f"the restarted primary loaded {loaded} keys from disk")
    elif kind == STALE:
        loaded = keys_loaded(group, group.restart_primary(empty=False))
        note = f"it loaded {loaded} keys saved {stale_age:.0f}s before"
    else:
        group.fail_over()
    settle(group)
    now = group.primary_port()
    if kind != "sentinel-failover" and now != old:
        note = f"the sentinels promoted port {now} in place of {old}"
    return Fault(kind, at, time.time() - at, note)


def snapshot(group: SentinelGroup, port: int) -> None:
    """BGSAVE on the server of `port`; return once it is written."""
    client = group.client(port)
    with contextlib.closing(client):
        before = client.lastsave()
        client.bgsave()
        wait_for(lambda: client.lastsave() != before, 30, "the snapshot to be written")


def keys_loaded(group: SentinelGroup, port: int) -> int:
    """How many keys the server of `port` loaded from disk as it started."""
    client = group.client(port)
    with contextlib.closing(client):
        return int(client.info("persistence")["rdb_last_load_keys_loaded"])


def settle(group: SentinelGroup) -> None:
    """Wait until every replica is in sync with the primary the sentinels name, on its
    replication history."""

    def in_sync() -> bool:
        with contextlib.suppress(redis.RedisError, ValueError):
            primary = group.primary_port()
            clients = {port: group.client(port) for port in group.data_ports}
            try:
                replid = clients[primary].info("replication")["master_replid"]
                for port, client in clients.items():
                    info = client.info("replication")
                    if port != primary and (
                        info["role"] != "slave"
                        or info.get("master_link_status") != "up"
                        or info.get("master_port") != primary
                        or info["master_replid"] != replid
                    ):
                        return False
                return True
            finally:
                for client in clients.values():
                    client.close()
        return False

    wait_for(in_sync, 60, "the replicas to be in sync with the primary")


def describe(fault: Fault) -> str:
    note = f"; {fault.note}" if fault.note else ""
    return f"{fault.kind} at {fault.at:.3f}, settled {fault.settled:.1f}s later{note}"
