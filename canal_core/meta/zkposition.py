"""The parser's position in ZooKeeper at ``{dest}/parse`` (Canal's ZooKeeperLogPositionManager)."""

from __future__ import annotations

from collections.abc import Iterable

from ..parse.position import PositionManager
from ..protocol.position import LogPosition
from .zkclient import (
    DEFAULT_SESSION_TIMEOUT_MS,
    ZkTarget,
)
from .zkfence import Fence
from .zookeeper import ZooKeeperMetaManager


class ZooKeeperPositionManager(PositionManager):
    """The parser's position at ``/otter/canal/destinations/{dest}/parse`` (Canal's
    ZooKeeperLogPositionManager): LogPosition JSON without "@type", written on every ``persist`` (fenced
    like the cursors), read from ZooKeeper by ``get_latest``."""

    def __init__(self, zk: ZkTarget, *, fence: Fence | Iterable[Fence] | None = None,
                 session_timeout_ms: int = DEFAULT_SESSION_TIMEOUT_MS) -> None:
        self.zookeeper = ZooKeeperMetaManager(zk, fence=fence, session_timeout_ms=session_timeout_ms)

    def set_fence(self, fence: Fence | Iterable[Fence] | None) -> None:
        self.zookeeper.set_fence(fence)

    def start(self) -> None:
        self.zookeeper.start()

    def stop(self) -> None:
        self.zookeeper.stop()

    def get_latest(self, destination: str) -> LogPosition | None:
        return self.zookeeper.get_parse_position(destination)

    def persist(self, destination: str, position: LogPosition) -> None:
        self.zookeeper.set_parse_position(destination, position)
