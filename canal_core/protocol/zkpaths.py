"""Where Canal keeps things in ZooKeeper (Canal's ZookeeperPathUtils; a Java Canal and its tools read ours
and we read theirs)::

    /otter/canal/destinations/{dest}                     persistent
        running                                          EPHEMERAL  {"active":true,"address":"ip:port"}
        cluster/{ip:port}                                EPHEMERAL
        parse                                            LogPosition JSON, no "@type"
        fence                                            ours (canal_core.meta.zkfence); Canal ignores it
        {clientId}                                       persistent, no data
            filter                                       raw UTF-8 filter, only when non-empty
            cursor                                       LogPosition JSON with "@type" (fastjson WriteClassName)
            mark/{0000000001}                            PERSISTENT_SEQUENTIAL PositionRange; batch id = sequence
            running                                      EPHEMERAL  {"active":true,"address":...,"clientId":1001}
    /otter/canal/cluster/{ip:port}                       EPHEMERAL  servers alive
"""

from __future__ import annotations

from .errors import CanalError

CANAL_ROOT = "/otter/canal"
DESTINATIONS_ROOT = CANAL_ROOT + "/destinations"
CLUSTER_ROOT = CANAL_ROOT + "/cluster"
FENCE_NODE = "fence"


class InvalidDestinationError(CanalError, ValueError):
    """A destination name that cannot be a ZooKeeper node name."""


def _check_destination(destination: str) -> str:
    if not destination or "/" in destination or destination in (".", ".."):
        raise InvalidDestinationError(f"invalid destination name {destination!r} for ZooKeeper: use letters, "
                                      "digits, _ . -")
    return destination


def destination_path(destination: str) -> str:
    return f"{DESTINATIONS_ROOT}/{_check_destination(destination)}"


def client_path(destination: str, client_id: int) -> str:
    return f"{destination_path(destination)}/{client_id}"


def filter_path(destination: str, client_id: int) -> str:
    return client_path(destination, client_id) + "/filter"


def cursor_path(destination: str, client_id: int) -> str:
    return client_path(destination, client_id) + "/cursor"


def mark_root(destination: str, client_id: int) -> str:
    return client_path(destination, client_id) + "/mark"


def mark_node(batch_id: int) -> str:
    return f"{batch_id:010d}"


def mark_path(destination: str, client_id: int, batch_id: int) -> str:
    return f"{mark_root(destination, client_id)}/{mark_node(batch_id)}"


def parse_path(destination: str) -> str:
    return destination_path(destination) + "/parse"


def server_running_path(destination: str) -> str:
    return destination_path(destination) + "/running"


def client_running_path(destination: str, client_id: int) -> str:
    return client_path(destination, client_id) + "/running"


def destination_cluster_root(destination: str) -> str:
    return destination_path(destination) + "/cluster"


def destination_cluster_path(destination: str, address: str) -> str:
    return f"{destination_cluster_root(destination)}/{address}"


def cluster_path(address: str) -> str:
    return f"{CLUSTER_ROOT}/{address}"


def fence_path(destination: str) -> str:
    return f"{destination_path(destination)}/{FENCE_NODE}"
