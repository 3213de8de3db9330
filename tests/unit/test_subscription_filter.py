"""A client's subscription filter: compiled (RE2) before anything is recorded; a refused one leaves the
subscription, the meta and the destination's filter as they were."""

from __future__ import annotations

import time
from typing import Any

import pytest

from canal_core.instance.destination import Destination
from canal_core.meta import MemoryMetaManager
from canal_core.protocol.identity import ClientIdentity
from canal_core.server.embedded import CanalServerWithEmbedded, SubscriptionFilterError
from canal_core.store.ring import MemoryEventStore


def _server() -> tuple[CanalServerWithEmbedded, Destination, list[Any]]:
    server = CanalServerWithEmbedded()
    dest = Destination("d1", MemoryEventStore(8), MemoryMetaManager())
    installed: list[Any] = []
    dest.filter_listeners.append(installed.append)
    server.start(dest)
    return server, dest, installed


def test_a_refused_filter_is_not_recorded_and_names_the_client() -> None:
    server, dest, installed = _server()
    with pytest.raises(SubscriptionFilterError, match=r"clientId:1001 destination:d1.*\(t\)\\\\1.*RE2"):
        server.subscribe(ClientIdentity("d1", 1001, "db\\.(t)\\1"))
    assert dest.meta.list_all_subscribe("d1") == [] and installed == []
    server.subscribe(ClientIdentity("d1", 1001, "db\\..*"))
    with pytest.raises(SubscriptionFilterError):
        server.subscribe(ClientIdentity("d1", 1001, "db\\.(?=t)t"))
    assert [c.filter for c in dest.meta.list_all_subscribe("d1")] == ["db\\..*"]
    assert len(installed) == 1 and installed[0].matches("db", "x") and not installed[0].matches("db2", "x")


@pytest.mark.timeout(20)
def test_a_catastrophic_filter_is_installed_and_matches_in_linear_time() -> None:
    server, _, installed = _server()
    server.subscribe(ClientIdentity("d1", 1001, "(?:[a-z_.0-9]+)+#"))
    start = time.perf_counter()
    assert not installed[0].matches("canal_test", "rx_abcdefghijklmnopqrstuvwxy")
    assert time.perf_counter() - start < 0.1
