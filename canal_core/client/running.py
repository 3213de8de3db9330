"""One active consumer per (destination, client id): Canal's ClientRunningMonitor.

Consumers of the same destination and client id elect one of themselves by creating
``/otter/canal/destinations/{dest}/{clientId}/running`` EPHEMERAL with
``{"active":true,"address":"ip:port","clientId":1001}``; the others watch it. The rules are the servers'
(canal_core.meta.election): the previous active re-grabs at once unless it released, others wait
``delay_s`` (5 s); a consumer whose ZooKeeper connection drops gets ``on_stop()`` at once and competes again
once reconnected. There is no fence: a consumer's writes (acks) go through the server, whose cursor writes
are fenced.

``on_start()`` may return an "ip:port" string: the running node's address is then rewritten to it (Canal's
client publishes the local address of its connection to the server there).

Usage::

    monitor = ClientRunningMonitor(zk, "example", 1001, "10.0.0.7:0", on_start=consume, on_stop=halt)
    monitor.start()          # consume() is called when this process becomes the active consumer
    ...
    monitor.stop()
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

from kazoo.exceptions import KazooException

from ..meta.election import DEFAULT_DELAY_S, RunningMonitor
from ..meta.zkclient import DEFAULT_SESSION_TIMEOUT_MS, ZkTarget
from ..meta.zkpayload import encode_client_running, split_address
from ..protocol.zkpaths import client_path, client_running_path

log = logging.getLogger(__name__)


class ClientRunningMonitor(RunningMonitor):
    """``zk``: KazooClient or connect string; ``address``: "ip:port" identifying this consumer (the previous
    active is recognised by it, as in Canal); ``on_start`` / ``on_stop``: begin and stop consuming."""

    def __init__(self, zk: ZkTarget, destination: str, client_id: int, address: str, *,
                 on_start: Callable[[], Any] | None = None, on_stop: Callable[[], Any] | None = None,
                 delay_s: float = DEFAULT_DELAY_S, session_timeout_ms: int = DEFAULT_SESSION_TIMEOUT_MS) -> None:
        if not -32768 <= client_id <= 32767:
            raise ValueError(f"clientId {client_id} is out of range (Canal stores it as a 16-bit short)")
        super().__init__(zk, path=client_running_path(destination, client_id),
                         data=encode_client_running(address, client_id), address=address,
                         parent=client_path(destination, client_id), on_start=on_start, on_stop=on_stop,
                         delay_s=delay_s, fence=None, session_timeout_ms=session_timeout_ms,
                         name=f"client-running-{destination}-{client_id}")
        self.destination = destination
        self.client_id = client_id
        self._user_on_start = on_start
        self.on_start = self._started_consuming

    def _started_consuming(self) -> None:
        if self._user_on_start is None:
            return
        got = self._user_on_start()
        if isinstance(got, str) and split_address(got) is not None and got != self.address:
            try:
                self.zk.set(self.path, encode_client_running(got, self.client_id))
            except KazooException as e:
                log.warning("%s: publishing the address %s failed: %r", self.path, got, e)
