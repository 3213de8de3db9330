"""Canal clients: connectors speaking Canal's TCP protocol to a canal-server (ours or Java's).

``SimpleConnector`` talks to one server; ``ClusterConnector`` fails over between several (a fixed list or
an address source such as ZooKeeper discovery). Both have the shape of Canal's Java CanalConnector:
connect, disconnect, check_valid, subscribe, unsubscribe, get, get_without_ack, ack, rollback.
"""

from ..protocol.codec import TimeUnit
from ..protocol.message import Message
from .connector import (
    Address,
    AddressSource,
    CanalAuthError,
    CanalClientError,
    CanalConnectionError,
    ClusterConnector,
    SimpleConnector,
)

__all__ = [
    "Address",
    "AddressSource",
    "CanalAuthError",
    "CanalClientError",
    "CanalConnectionError",
    "ClusterConnector",
    "Message",
    "SimpleConnector",
    "TimeUnit",
]
