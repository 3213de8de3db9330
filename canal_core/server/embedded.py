"""The embedded Canal server API (CanalServerWithEmbedded): subscribe, getWithoutAck, ack, rollback.

Transport-free: the TCP server (canal_core.server.tcp) and in-process consumers such as the Dagster
pipeline call the same methods. Thread-safe: one lock per destination serialises get / ack / rollback, as the
meta ledger requires.

Timeouts are in seconds: None waits until a full batch is there; 0 returns what is there now (Canal's
tryGet); t > 0 waits at most t seconds, then returns what is there. An empty result is batch id -1. A get
waits on the store without the destination's lock (Canal holds it): acks, rollbacks and other clients' gets
go on meanwhile, and a get whose ``cancelled`` says True (its client went away) stops waiting.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterable

from ..instance.destination import Destination
from ..meta import PositionRange
from ..parse.filter import FilterConfigError, TableFilter
from ..protocol.errors import CanalError
from ..protocol.identity import ClientIdentity
from ..protocol.message import Message
from ..protocol.position import LogPosition
from ..store.ring import Batch


class CanalServerError(CanalError):
    """A request the server cannot serve (unknown destination, stopped instance)."""


class SubscriptionFilterError(CanalServerError):
    """A client's subscription filter that cannot be compiled; names the client and the destination."""


class GetCancelled(CanalServerError):
    """A waiting get ended because its ``cancelled`` said so (the client went away); nothing was taken."""


class CanalServerWithEmbedded:
    def __init__(self) -> None:
        self._destinations: dict[str, Destination] = {}
        self._lock = threading.Lock()

    # ---- lifecycle -----------------------------------------------------------------------------

    def start(self, destination: Destination) -> None:
        with self._lock:
            if destination.name in self._destinations:
                raise CanalServerError(f"destination {destination.name} is already started")
            destination.start()
            self._destinations[destination.name] = destination

    def stop(self, name: str) -> None:
        with self._lock:
            dest = self._destinations.pop(name, None)
        if dest is not None:
            dest.stop()

    def stop_all(self) -> None:
        for name in list(self._destinations):
            self.stop(name)

    def is_start(self, name: str) -> bool:
        return name in self._destinations

    def destinations(self) -> Iterable[str]:
        return list(self._destinations)

    def _dest(self, name: str) -> Destination:
        dest = self._destinations.get(name)
        if dest is None:
            raise CanalServerError(f"destination:{name} should start first")
        return dest

    # ---- Canal's API ---------------------------------------------------------------------------

    def subscribe(self, client: ClientIdentity) -> None:
        """Canal's subscribe; a filter RE2 cannot run is refused before anything is stored (SubscriptionFilterError)."""
        dest = self._dest(client.destination)
        table_filter = None
        if client.filter:
            key = f"filter of clientId:{client.client_id} destination:{client.destination}"
            try:
                table_filter = TableFilter(client.filter, empty_accepts=True, key=key)
            except FilterConfigError as e:
                raise SubscriptionFilterError(str(e)) from None
        with dest.lock:
            dest.meta.subscribe(client)
            if table_filter is not None:
                # a non-empty client filter replaces the instance's filter regex (Canal's rule)
                for listener in dest.filter_listeners:
                    listener(table_filter)

    def unsubscribe(self, client: ClientIdentity) -> None:
        dest = self._dest(client.destination)
        with dest.lock:
            dest.meta.unsubscribe(client)

    def get_without_ack(self, client: ClientIdentity, batch_size: int, timeout: float | None = None,
                        cancelled: Callable[[], bool] | None = None) -> Message:
        """The next batch (see the module doc for ``timeout``). ``cancelled``: asked while the get waits (it
        must be quick); True ends the wait with GetCancelled."""
        dest = self._dest(client.destination)
        deadline = None if timeout is None else time.monotonic() + timeout
        while True:
            with dest.lock:
                dest.ledger.check_subscribe(client)
                if deadline is not None and time.monotonic() >= deadline:
                    batch: Batch | None = dest.store.try_get(batch_size)
                else:
                    batch = dest.store.get_if_enough(batch_size)
                if batch is not None:
                    return self._register(dest, client, batch)
            left = None if deadline is None else max(0.0, deadline - time.monotonic())
            # outside the destination's lock: another client may take what arrives first, then this one waits on
            dest.store.wait_for(batch_size, left, cancelled)
            if cancelled is not None and cancelled():
                raise GetCancelled(f"the get of {client.destination}/{client.client_id} ended: its client went away")

    @staticmethod
    def _register(dest: Destination, client: ClientIdentity, batch: Batch) -> Message:
        if not batch.events:
            return Message(batch_id=-1)
        assert batch.start is not None and batch.end is not None
        ident = dest.identity
        rng = PositionRange(start=LogPosition(ident, batch.start),
                            ack=LogPosition(ident, batch.ack) if batch.ack is not None else None,
                            end=LogPosition(ident, batch.end), end_seq=batch.end_seq)
        batch_id = dest.ledger.register(client, rng)
        dest.on_batch(client, batch_id, batch.events)
        return Message(batch_id, batch.data, batch.events)

    def get(self, client: ClientIdentity, batch_size: int, timeout: float | None = None) -> Message:
        """getWithoutAck followed by ack of that batch (Canal's get)."""
        msg = self.get_without_ack(client, batch_size, timeout)
        if not msg.empty:
            self.ack(client, msg.batch_id)
        return msg

    def ack(self, client: ClientIdentity, batch_id: int) -> None:
        """Ack the oldest outstanding batch: the client cursor moves to its ack position and the store frees
        its slots. Canal's errors: BatchOrderError ("batchId:x is not the firstly:y"), BatchNotExistError."""
        dest = self._dest(client.destination)
        with dest.lock:
            rng = dest.ledger.ack(client, batch_id)
            dest.on_ack(client, batch_id)
            if rng.end_seq >= 0:
                dest.store.ack(seq=rng.end_seq)

    def rollback(self, client: ClientIdentity, batch_id: int | None = None) -> None:
        """Drop outstanding batches (all, or batch_id and later) and rewind the store's get cursor: the
        same entries, byte-identical and in order, come again."""
        dest = self._dest(client.destination)
        with dest.lock:
            if not dest.meta.has_subscribe(client):
                return  # connectors roll back on connect, before subscribing: must not rewind the store (Canal)
            dest.ledger.rollback(client, batch_id)
            dest.on_rollback(client)
            dest.store.rollback()

    def metrics(self, name: str) -> dict[str, float]:
        """The destination's counters under Canal's metric names (docs/canal-compat.md §7; the TCP server adds the
        client_* ones and exports them for Prometheus)."""
        dest = self._dest(name)
        st = dest.store.stats()
        parsers = dest.all_parsers()
        now = int(time.time() * 1000)
        last = max((p.last_event_ms for p in parsers), default=0)
        return {
            "canal_instance_subscriptions": float(len(dest.meta.list_all_subscribe(name))),
            "canal_instance_traffic_delay": float(now - last) if last else 0.0,
            "canal_instance_transactions": float(sum(p.transactions for p in parsers)),
            "canal_instance_received_binlog_bytes": float(sum(p.received_bytes for p in parsers)),
            "canal_instance_publish_blocking_time": sum(p.sink_blocking for p in parsers) * 1000,
            "canal_instance_sink_blocking_time": st.blocking_time * 1000,
            "canal_instance_store_produce_seq": float(st.put_seq),
            "canal_instance_store_consume_seq": float(st.ack_seq),
            "canal_instance_store_produce_mem": float(st.put_mem),
            "canal_instance_store_consume_mem": float(st.ack_mem),
            "canal_instance_put_delay": float(st.put_delay),
            "canal_instance_get_delay": float(st.get_delay),
            "canal_instance_ack_delay": float(st.ack_delay),
            "canal_instance_put_rows": float(st.put_rows),
            "canal_instance_get_rows": float(st.get_rows),
            "canal_instance_ack_rows": float(st.ack_rows),
        }

    def list_batch_ids(self, client: ClientIdentity) -> list[int]:
        dest = self._dest(client.destination)
        with dest.lock:
            return list(dest.meta.list_all_batches(client))
