"""The batch rules of Canal's embedded server (CanalServerWithEmbedded), kept apart from the transport and
the event store so the embedded server, and later the TCP server, share them.

The server calls, for one destination:
- ``register(client, range)`` when getWithoutAck returns a non-empty batch -> the batch id;
- ``ack(client, batch_id)`` -> the acked range; the server then frees the store up to ``range.end`` /
  ``range.end_seq``;
- ``rollback(client[, batch_id])`` -> the dropped batches; the server then rewinds the store's get cursor to
  its ack cursor, so everything not acked is delivered again.

Rules (with Canal's texts, see errors.py):
- ack names the oldest outstanding batch, else "batchId:{x} is not the firstly:{y}"; an id that is not
  outstanding: "ack error , clientId:{c} batchId:{b} is not exist , please check". A client that has not
  subscribed: "ClientIdentity:... should subscribe first".
- ack moves the client cursor to the batch's ack position (no move when the batch ended inside a
  transaction and so has none).
- rollback() drops every outstanding batch. A client that has not subscribed is ignored (Canal's clients
  roll back on their first connection, before subscribing).
- rollback(batch_id) must name the oldest outstanding batch (same order rule and Canal's "rollback error, ..."
  text for an unknown id). Canal removes only that batch's record while the store rewinds to the ack cursor,
  so the later batches' rows come again under new ids while their stale records stay and block every later
  ack ("is not the firstly"). We drop that batch and every later one: the records then match what the
  store will redeliver.

``lock`` serializes these calls per destination (Canal synchronizes on the instance): the server holds it
around "read next_start, take events from the store, register" so batches and the store agree. Holding it
in ``ack`` also keeps two concurrent acks from moving the cursor backwards (a race Canal has).
"""

from __future__ import annotations

import threading

from ..parse.position import MetaPositionManager
from ..protocol.identity import ClientIdentity
from ..protocol.position import LogPosition
from .errors import BatchNotExistError, NotSubscribedError
from .manager import MetaManager
from .model import PositionRange


class BatchLedger:
    def __init__(self, meta: MetaManager) -> None:
        self.meta = meta
        self.lock = threading.RLock()

    def check_subscribe(self, client: ClientIdentity) -> None:
        if not self.meta.has_subscribe(client):
            raise NotSubscribedError(client)

    def next_start(self, client: ClientIdentity) -> LogPosition | None:
        """Where getWithoutAck continues: after the latest outstanding batch, else after the client's cursor;
        None: the client never acked, start from the store's first event."""
        with self.lock:
            last = self.meta.get_last_batch(client)
            if last is not None:
                return last[1].end
            return self.meta.get_cursor(client)

    def register(self, client: ClientIdentity, position_range: PositionRange) -> int:
        with self.lock:
            self.check_subscribe(client)
            return self.meta.add_batch(client, position_range)

    def ack(self, client: ClientIdentity, batch_id: int) -> PositionRange:
        with self.lock:
            self.check_subscribe(client)
            acked = self.meta.remove_batch(client, batch_id)  # raises BatchOrderError when not the oldest
            if acked is None:
                raise BatchNotExistError("ack", client.client_id, batch_id)
            if acked.ack is not None:
                self.meta.update_cursor(client, acked.ack)
            return acked

    def rollback(self, client: ClientIdentity, batch_id: int | None = None) -> list[tuple[int, PositionRange]]:
        """Drop outstanding batches (all, or ``batch_id`` and the later ones); returns them, oldest first."""
        with self.lock:
            if not self.meta.has_subscribe(client):
                return []
            dropped: list[tuple[int, PositionRange]] = []
            if batch_id is not None:
                first = self.meta.remove_batch(client, batch_id)  # raises BatchOrderError when not the oldest
                if first is None:
                    raise BatchNotExistError("rollback", client.client_id, batch_id)
                dropped.append((batch_id, first))
            dropped.extend(self.meta.list_all_batches(client).items())
            self.meta.clear_all_batches(client)
            return dropped

    def min_cursor(self, destination: str) -> LogPosition | None:
        """The parser's restart position: the smallest cursor over the destination's subscribed clients."""
        return self.meta.min_cursor(destination)


def meta_position_manager(meta: MetaManager) -> MetaPositionManager:
    """The parse-position manager that restarts the parser from the minimum client cursor (Canal's
    MetaLogPositionManager), usually the secondary of a FailbackPositionManager."""
    return MetaPositionManager(meta.min_cursor)
