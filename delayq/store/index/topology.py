"""What the operator is shown of the Redis delayq talks to: the primary (on a Cluster, each
master) with its role, version, eviction policy, persistence and replicas, one INFO each."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, cast

import redis
from redis.cluster import RedisCluster

from .clusters import is_cluster


@dataclass(frozen=True)
class Server:
    """One data server as it describes itself."""

    address: str  # host:port, or "" where the client does not say (the URL names it)
    role: str  # "master" or "slave", as INFO says
    version: str
    eviction: str  # maxmemory-policy
    persistence: str | None  # "AOF", "RDB", "none", or None where CONFIG GET is refused
    replicas: tuple[str, ...]  # "host:port (lag Ns)" of each replica connected to it
    primary: str  # for a replica: the primary it follows


def servers(client: redis.Redis) -> list[Server]:
    """The server `client` writes to, or on a Cluster every master; raises RedisError."""
    if not is_cluster(client):
        return [_server(client, "")]
    cluster = cast(RedisCluster, client)
    nodes = sorted(cluster.get_primaries(), key=lambda node: node.name)
    return [_server(cluster.get_redis_connection(node), node.name) for node in nodes]


def _server(client: redis.Redis, address: str) -> Server:
    info: dict[str, Any] = client.info()
    replicas = tuple(
        f"{found['ip']}:{found['port']} (lag {found.get('lag', '?')}s)"
        for name, found in sorted(info.items())
        if name.startswith("slave") and isinstance(found, dict)
    )
    role = str(info.get("role", "?"))
    return Server(
        address=address,
        role=role,
        version=str(info.get("redis_version", "?")),
        eviction=str(info.get("maxmemory_policy", "unknown")),
        persistence=_persistence(client, info),
        replicas=replicas,
        primary=f"{info.get('master_host')}:{info.get('master_port')}" if role == "slave" else "",
    )


def _persistence(client: redis.Redis, info: dict[str, Any]) -> str | None:
    if int(info.get("aof_enabled", 0)):
        return "AOF"
    try:
        save = client.config_get("save").get("save", "")
    except redis.ResponseError:  # managed services refuse CONFIG
        return None
    return "RDB" if str(save).strip() else "none"
