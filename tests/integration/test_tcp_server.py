"""Canal's TCP server over real destinations on the private MariaDB, through our connectors and through a
raw socket speaking the wire protocol by hand: password auth, GET timeout rules, CLIENTACK without a
reply and ack errors read at the next request, 401/402/400 errors, rollback, two destinations and
concurrent clients (idle timeouts, failover and the controller: test_tcp_server_failover.py).

Rows are checked against what MariaDB itself returns (SELECT ... CAST(col AS CHAR)), after applying the
received row changes in order."""

from __future__ import annotations

import threading
import time
from typing import Any

import pytest

from canal_core.client import (
    CanalAuthError,
    CanalClientError,
    SimpleConnector,
    TimeUnit,
)
from canal_core.protocol.proto import CanalProtocol_pb2 as cp
from tests.integration.tcp_served import (
    PASSWORD,
    TABLE_A,
    TABLE_B,
    USER,
    Raw,
    Served,
    ack_all,
    apply_entries,
    drain,
    entries_of,
    select_rows,
    write_rows,
)

pytestmark = pytest.mark.integration


def test_password_auth(served: Served, admin_conn: Any) -> None:
    # the right password, scrambled with the seed: rows come through and match MariaDB
    with served.connector() as conn:
        assert conn.check_valid()
        conn.subscribe()
        write_rows(admin_conn, TABLE_A, 1, 4)
        want = select_rows(admin_conn, TABLE_A)
        assert drain(conn, TABLE_A, want) == want and len(want) == 3

    for user, password in ((USER, "wrong"), (USER, ""), ("bob", PASSWORD)):
        with pytest.raises(CanalAuthError) as err:
            SimpleConnector(served.addr, "d1", user, password).connect()
        assert err.value.code == 400 and err.value.message == f"auth failed for user:{user}"
    # the password sent unscrambled (what canal-python does) is refused, and the connection closed: one
    # attempt per connection; a new connection with a correct ClientAuth then passes
    raw = Raw(served.addr)
    try:
        raw.send(cp.CLIENTAUTHENTICATION, cp.ClientAuth(username=USER, password=PASSWORD.encode()))
        refused = raw.ack()
        assert (refused.error_code, refused.error_message) == (400, f"auth failed for user:{USER}")
        with pytest.raises(EOFError):
            raw.read(timeout=5)
    finally:
        raw.close()
    throttle = served.tcp.throttle  # four failures from this address: its next attempt waits 2 s
    assert throttle.failures("127.0.0.1") == 4
    time.sleep(throttle.backoff(4))  # (longer than this server's auth timeout, so wait before connecting)
    raw = Raw(served.addr)
    try:
        assert raw.auth().error_code == 0
    finally:
        raw.close()
    # a refused ClientAuth names no destination to the metrics hooks: a guesser creates no labelled series
    raw = Raw(served.addr)
    try:
        assert raw.auth("wrong", destination="guess-1", client_id="1001").error_code == 400
    finally:
        raw.close()
    deadline = time.monotonic() + 5  # a hook runs after the reply is written
    while len(served.hooks.of("request_error")) < 5 and time.monotonic() < deadline:
        time.sleep(0.01)
    assert [d for d, _ in served.hooks.of("request_error")] == [None] * 5
    assert "guess-1" not in {d for d, _ in served.hooks.of("packet_received")}


def test_get_timeout_rules(served: Served, admin_conn: Any) -> None:
    conn = served.connector()
    conn.connect()
    state: dict[str, Any] = {}
    try:
        conn.subscribe()
        t0 = time.monotonic()
        conn.get_without_ack(1000)  # timeout None -> -1 on the wire: try-get
        assert time.monotonic() - t0 < 1.0
        conn.rollback()
        t0 = time.monotonic()
        conn.get_without_ack(1000, 1500, TimeUnit.MILLISECONDS)  # waits the timeout: 1000 entries never come
        assert 1.4 <= time.monotonic() - t0 < 5.0
        conn.rollback()
        t0 = time.monotonic()
        conn.get_without_ack(1000, 1, TimeUnit.SECONDS)
        assert 0.9 <= time.monotonic() - t0 < 5.0
        conn.rollback()

        # blocking get (timeout 0): returns when the rows are there, not before. 6 entries = our first two
        # transactions; other tables' empty transactions (2 entries, at most one per 5 s) cannot fill it
        ack_all(conn)
        timer = threading.Timer(1.0, write_rows, (admin_conn, TABLE_A, 1, 4))
        t0 = time.monotonic()
        timer.start()
        msg = conn.get_without_ack(6, 0)
        waited = time.monotonic() - t0
        timer.join()
        assert waited >= 0.9 and len(msg.raw_entries) >= 6
        assert apply_entries(msg.entries, TABLE_A, state) >= 1
        conn.ack(msg.batch_id)
        want = select_rows(admin_conn, TABLE_A)
        assert drain(conn, TABLE_A, want, state) == want and len(want) == 3
        ack_all(conn)
    finally:
        conn.disconnect()

    # a GET without the timeout field (proto3 reads it as 0) blocks too
    raw = Raw(served.addr)
    try:
        assert raw.auth(destination="d1", client_id="1001").error_code == 0
        raw.get(fetch=6)
        assert raw.nothing_pending(1.0)
        write_rows(admin_conn, TABLE_A, 10, 2)
        msgs = raw.messages(timeout=20)
        assert len(msgs.messages) >= 6
        want = select_rows(admin_conn, TABLE_A)
        while True:
            apply_entries(entries_of(msgs), TABLE_A, state)
            raw.send(cp.CLIENTACK, cp.ClientAck(destination="d1", client_id="1001", batch_id=msgs.batch_id))
            if state == want:
                break
            raw.get(fetch=100, timeout=500, unit=2)
            msgs = raw.messages()
        assert state == want and len(want) == 4
    finally:
        raw.close()


def test_ack_without_reply_and_errors(served: Served, admin_conn: Any) -> None:
    raw = Raw(served.addr)
    try:
        # destination + client id in ClientAuth: subscribed at auth, no SUBSCRIPTION needed
        assert raw.auth(destination="d1", client_id="1001").error_code == 0
        write_rows(admin_conn, TABLE_A, 1, 6)
        want = select_rows(admin_conn, TABLE_A)
        state: dict[str, Any] = {}

        def get_batch() -> cp.Messages:
            raw.get(fetch=3, timeout=3000, unit=2)
            m = raw.messages()
            assert m.batch_id > 0
            return m

        a = get_batch()
        b = get_batch()
        # the raw fast path: a Packet with only type and body
        raw.get(fetch=3, timeout=3000, unit=2)
        fast = cp.Packet.FromString(raw.read_bytes())
        assert [f.name for f, _ in fast.ListFields()] == ["type", "body"]
        c = cp.Messages.FromString(fast.body)
        assert c.batch_id > b.batch_id and len(c.messages) > 0

        # out-of-order ack: no reply now; the 400 is what the NEXT request reads first, then its own reply
        raw.send(cp.CLIENTACK, cp.ClientAck(destination="d1", client_id="1001", batch_id=b.batch_id))
        raw.get(fetch=3, timeout=-1)
        err = raw.ack()
        assert err.error_code == 400
        assert f"batchId:{b.batch_id} is not the firstly:{a.batch_id}" in err.error_message
        d = raw.messages()  # the GET's own reply follows: the connection was not closed

        # in-order acks: no reply at all; the next request's reply is its own
        for m in (a, b, c, d):
            if m.batch_id != -1:
                raw.send(cp.CLIENTACK, cp.ClientAck(destination="d1", client_id="1001", batch_id=m.batch_id))
            apply_entries(entries_of(m), TABLE_A, state)
        assert raw.nothing_pending(0.5)
        raw.get(fetch=100, timeout=-1)
        e = raw.messages()
        apply_entries(entries_of(e), TABLE_A, state)
        if e.batch_id != -1:
            raw.send(cp.CLIENTACK, cp.ClientAck(destination="d1", client_id="1001", batch_id=e.batch_id))
        assert raw.nothing_pending(0.5)
        while state != want:  # whatever the parser had not yet stored
            raw.get(fetch=100, timeout=500, unit=2)
            m = raw.messages()
            apply_entries(entries_of(m), TABLE_A, state)
            raw.send(cp.CLIENTACK, cp.ClientAck(destination="d1", client_id="1001", batch_id=m.batch_id))
        assert state == want

        # batch id 0 -> 402; batch id -1 -> ignored; a batch that does not exist -> 400
        raw.send(cp.CLIENTACK, cp.ClientAck(destination="d1", client_id="1001", batch_id=0))
        raw.send(cp.CLIENTACK, cp.ClientAck(destination="d1", client_id="1001", batch_id=-1))
        raw.get(timeout=-1)
        zero = raw.ack()
        assert (zero.error_code, zero.error_message) == (402, "batchId should assign value")
        assert raw.messages().batch_id == -1 and raw.nothing_pending(0.3)
        raw.send(cp.CLIENTACK, cp.ClientAck(destination="d1", client_id="1001", batch_id=999))
        raw.get(timeout=-1)
        missing = raw.ack()
        assert missing.error_code == 400 and "clientId:1001 batchId:999 is not exist" in missing.error_message
        assert raw.messages().batch_id == -1

        # missing destination / client id -> 401, unknown destination -> 400 (Canal: "should start first")
        raw.get(client="")
        no_client = raw.ack()
        assert (no_client.error_code, no_client.error_message) == (401, "destination or clientId is null")
        raw.send(cp.SUBSCRIPTION, cp.Sub(client_id="1001"))
        no_dest = raw.ack()
        assert (no_dest.error_code, no_dest.error_message) == (401, "destination or clientId is null")
        raw.send(cp.CLIENTACK, cp.ClientAck(destination="d1", batch_id=5))
        assert raw.ack().error_code == 401
        raw.get(dest="nope", timeout=-1)
        unknown = raw.ack()
        assert unknown.error_code == 400 and "destination:nope should start first" in unknown.error_message

        # packet types the server does not serve
        for ptype, name in ((cp.SHUTDOWN, "SHUTDOWN"), (cp.DUMP, "DUMP"), (cp.HEARTBEAT, "HEARTBEAT")):
            raw.send(ptype, raw_body=b"")
            got = raw.ack()
            assert (got.error_code, got.error_message) == (400, f"packet type={name} is NOT supported!")

        # rollback: no reply, also for a client that never subscribed
        raw.send(cp.CLIENTROLLBACK, cp.ClientRollback(destination="d1", client_id="1001", batch_id=0))
        raw.send(cp.CLIENTROLLBACK, cp.ClientRollback(destination="d1", client_id="2000", batch_id=0))
        assert raw.nothing_pending(0.5)
        raw.get(timeout=-1)
        assert raw.messages().batch_id == -1  # still usable after all those errors
    finally:
        raw.close()

    h = served.hooks
    assert {code for _, code in h.of("request_error")} >= {400, 401, 402}
    types = {t for _, t in h.of("packet_received")}
    assert types >= {"CLIENTAUTHENTICATION", "GET", "CLIENTACK", "CLIENTROLLBACK", "SUBSCRIPTION", "SHUTDOWN"}
    assert ("d1",) in h.of("empty_batch")
    assert sum(n for d, n in h.of("bytes_sent") if d == "d1") > 0
    assert any(d == "d1" and t == "GET" and s >= 0 for d, t, s in h.of("request_latency"))


def test_connector_reads_ack_error_at_next_request(served: Served, admin_conn: Any) -> None:
    with served.subscribed() as conn:
        write_rows(admin_conn, TABLE_A, 1, 6)
        a = conn.get_without_ack(3, 3, TimeUnit.SECONDS)
        b = conn.get_without_ack(3, 3, TimeUnit.SECONDS)
        assert a.batch_id > 0 and b.batch_id > a.batch_id
        conn.ack(b.batch_id)  # out of order: no reply yet
        with pytest.raises(CanalClientError) as err:
            conn.get_without_ack(3, -1)
        assert err.value.code == 400 and err.value.stale
        assert f"batchId:{b.batch_id} is not the firstly:{a.batch_id}" in err.value.message
        assert not conn.connected  # the stream was out of step: dropped
        conn.connect()  # rolls back: the same entries come again, byte for byte
        a2 = conn.get_without_ack(3, 3, TimeUnit.SECONDS)
        assert a2.raw_entries == a.raw_entries and a2.batch_id > b.batch_id
        conn.rollback()
        want = select_rows(admin_conn, TABLE_A)
        assert drain(conn, TABLE_A, want) == want


def test_rollback_regets_the_same_entries(served: Served, admin_conn: Any) -> None:
    with served.subscribed() as conn:
        write_rows(admin_conn, TABLE_A, 10, 8)
        a = conn.get_without_ack(4, 3, TimeUnit.SECONDS)
        b = conn.get_without_ack(4, 3, TimeUnit.SECONDS)
        assert not a.empty and not b.empty
        conn.rollback()  # everything outstanding
        a2 = conn.get_without_ack(4, 3, TimeUnit.SECONDS)
        b2 = conn.get_without_ack(4, 3, TimeUnit.SECONDS)
        assert (a2.raw_entries, b2.raw_entries) == (a.raw_entries, b.raw_entries)
        assert [e.SerializeToString() for e in a2.entries] == a2.raw_entries
        conn.rollback(a2.batch_id)  # that batch and the later ones
        a3 = conn.get_without_ack(4, 3, TimeUnit.SECONDS)
        assert a3.raw_entries == a.raw_entries
        conn.ack(a3.batch_id)
        state: dict[str, Any] = {}
        apply_entries(a3.entries, TABLE_A, state)
        b3 = conn.get_without_ack(4, 3, TimeUnit.SECONDS)
        assert b3.raw_entries == b.raw_entries  # after an ack, what follows it
        conn.rollback()
        want = select_rows(admin_conn, TABLE_A)
        assert drain(conn, TABLE_A, want, state) == want and len(want) == 7


def test_another_client_connecting_does_not_rewind(served: Served, admin_conn: Any) -> None:
    """Connectors (ours, Canal's, canal-python) roll back on connect, before they subscribe: for a client
    that is not subscribed that must be a no-op, not a rewind of the destination's store under the
    clients that are (Canal ignores it)."""
    with served.connector() as conn:
        conn.subscribe()
        write_rows(admin_conn, TABLE_A, 1, 6)
        a = conn.get_without_ack(3, 3, TimeUnit.SECONDS)
        assert not a.empty
        with served.connector(client_id="1500"):  # connect = rollback of 1500, never subscribed
            pass
        raw = Raw(served.addr)
        try:
            assert raw.auth().error_code == 0
            raw.send(cp.CLIENTROLLBACK, cp.ClientRollback(destination="d1", client_id="1600", batch_id=0))
            raw.get(dest="d1", client="1600", timeout=-1)  # makes sure the rollback was handled
            assert "should subscribe first" in raw.ack().error_message
        finally:
            raw.close()
        b = conn.get_without_ack(3, 3, TimeUnit.SECONDS)
        assert b.raw_entries != a.raw_entries and not set(b.raw_entries) & set(a.raw_entries)
        conn.ack(a.batch_id)
        conn.ack(b.batch_id)
        state: dict[str, Any] = {}
        apply_entries(a.entries + b.entries, TABLE_A, state)
        want = select_rows(admin_conn, TABLE_A)
        assert drain(conn, TABLE_A, want, state) == want


def test_two_destinations_and_concurrent_clients(served: Served, admin_conn: Any) -> None:
    results: dict[str, Any] = {}
    want_b: dict[str, Any] = {}
    want_b_ready = threading.Event()

    def blocked_consumer() -> None:
        # d2: a blocking get while table B is still empty. 12 entries: only our writes can fill it (other
        # tables' empty transactions come as 2 entries at most every 5 s)
        with served.connector("d2") as c:
            c.subscribe()
            first = c.get_without_ack(12, 0)
            results["d2_returned_at"] = time.monotonic()
            state: dict[str, Any] = {}
            apply_entries(first.entries, TABLE_B, state)
            c.ack(first.batch_id)
            want_b_ready.wait(30)
            results["d2"] = drain(c, TABLE_B, want_b, state)

    def churn(i: int) -> None:  # more clients at the same time: connect, get refused (not subscribed), go
        for _ in range(5):
            with served.connector("d1", client_id=str(3000 + i)) as c:
                with pytest.raises(CanalClientError, match="should subscribe first"):
                    c.get_without_ack(10)
        results[f"churn{i}"] = True

    own_conn = served.connector("d1")
    t2 = threading.Thread(target=blocked_consumer)
    t2.start()
    churners = [threading.Thread(target=churn, args=(i,)) for i in range(4)]
    for t in churners:
        t.start()
    try:
        own_conn.connect()
        own_conn.subscribe()
        write_rows(admin_conn, TABLE_A, 1, 5)
        want_a = select_rows(admin_conn, TABLE_A)
        assert drain(own_conn, TABLE_A, want_a) == want_a and len(want_a) == 4
        for t in churners:
            t.join(30)
        assert all(results.get(f"churn{i}") for i in range(4))
        assert t2.is_alive() and "d2_returned_at" not in results  # still blocked, yet nobody else was
        written_at = time.monotonic()
        write_rows(admin_conn, TABLE_B, 100, 4)
        want_b.update(select_rows(admin_conn, TABLE_B))
        want_b_ready.set()
        t2.join(30)
        assert results["d2_returned_at"] >= written_at
        assert results["d2"] == want_b and len(want_b) == 3
    finally:
        want_b_ready.set()
        own_conn.disconnect()
        t2.join(1)
