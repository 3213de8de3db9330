"""Two canal-server PROCESSES in HA on the private ZooKeeper and MariaDB.

Both serve the same destination with Canal's default-instance.xml (period-mixed meta in ZooKeeper), each with
its own conf dir, run dir and replica id, 2 s ZooKeeper sessions (canal.zookeeper.session.timeout) and TZ=UTC.
A ClusterConnector consumer finds the active server through ServerDiscovery and reads rows a background
thread inserts (known ids, committed by the test) while:

3. the active process is SIGKILLed: the standby holds ``{dest}/running`` within 10 s, the consumer goes on from
   the ZooKeeper cursor (nothing at or before it comes again), every inserted row arrives, the cursor never
   moves backwards and ends at or past the last acked transaction, and its JSON has Canal's shape;
4. the active is cut off from ZooKeeper (its connect string goes through a proxy that goes silent) but not
   from MariaDB: it stops dumping before the standby starts, and a SHOW PROCESSLIST sampler running over the
   whole test never sees two of our dump connections at once; rows keep flowing after the takeover, and once
   the proxy heals the cut server stays a standby.

Also: a clean SIGTERM flushes the last cursor while holding the fence, then releases (the standby starts after
Canal's 5 s delay and redelivers nothing), and auto scan adds and removes monitors (in-process controller).

Our dump connections: 'Binlog Dump' threads whose client port SHOW SLAVE HOSTS lists under one of the two
servers' replica ids (our COM_REGISTER_SLAVE reports the connection's local port).
"""

from __future__ import annotations

import itertools
import json
import os
import random
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path
from typing import Any

import pymysql
import pytest
from kazoo.client import KazooClient

from canal_core.client.connector import CanalClientError, ClusterConnector
from canal_core.client.zookeeper import ServerDiscovery
from canal_core.protocol.proto import EntryProtocol_pb2 as ep
from canal_core.protocol.zkpaths import cluster_path, cursor_path, destination_cluster_path
from canal_core.server.controller import CanalController
from tests.integration.server_process import running_address
from tests.support.net import CutProxy, free_port
from tests.support.waiting import wait_until

pytestmark = pytest.mark.integration

BIN = Path(sys.executable).parent / "canal-server"
DEST = "hadest"
SESSION_MS = 2000  # the private ZooKeeper allows 1 s; Canal's 90 s default would not fit the 10 s budget
CLIENT_ID = 1001
Pos = tuple[str, int]  # (binlog file, offset)


wait_for = partial(wait_until, step=0.05)


class HaServer:
    """A canal-server process in the HA cluster: its own conf dir, run dir, ports and replica id."""

    def __init__(self, root: Path, name: str, zk: str, settings: Any, table: str, *, slave_id: int,
                 session_ms: int = SESSION_MS, flush_ms: int = 200) -> None:
        self.name = name
        self.conf = root / name / "conf"
        self.run = root / name / "logs"
        self.port = free_port()
        self.slave_id = slave_id
        self.address = f"127.0.0.1:{self.port}"
        (self.conf / DEST).mkdir(parents=True)
        (self.conf / "canal.properties").write_text(
            f"canal.ip = 127.0.0.1\ncanal.port = {self.port}\ncanal.metrics.pull.port = {free_port()}\n"
            f"canal.destinations = {DEST}\ncanal.auto.scan = false\n"
            f"canal.zkServers = {zk}\ncanal.zookeeper.session.timeout = {session_ms}\n"
            f"canal.zookeeper.flush.period = {flush_ms}\n"
            "canal.instance.global.spring.xml = classpath:spring/default-instance.xml\n"
            f"canal.file.data.dir = {root / name / 'data'}\n")
        (self.conf / DEST / "instance.properties").write_text(
            f"canal.instance.mysql.slaveId = {slave_id}\n"
            f"canal.instance.master.address = {settings.host}:{settings.port}\n"
            "canal.instance.dbUsername = canal\ncanal.instance.dbPassword = canal\n"
            f"canal.instance.filter.regex = {table.replace('.', chr(92) * 2 + '.')}\n")
        self.proc: subprocess.Popen[bytes] | None = None

    def start(self) -> None:
        self.run.mkdir(parents=True, exist_ok=True)
        out = open(self.run / "canal.out", "ab")
        self.proc = subprocess.Popen([str(BIN), "run", "--conf", str(self.conf), "--run-dir", str(self.run)],
                                     env={**os.environ, "TZ": "UTC"}, stdout=out, stderr=out)
        out.close()

        def listening() -> bool:
            assert self.proc is not None and self.proc.poll() is None, \
                f"{self.name} exited {self.proc and self.proc.returncode}: {self.log_tail()}"
            try:
                socket.create_connection(("127.0.0.1", self.port), timeout=1).close()
                return True
            except OSError:
                return False

        wait_for(listening, 30, f"{self.name} listening on {self.port}", step=0.1)

    def cli(self, command: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run([str(BIN), command, "--conf", str(self.conf), "--run-dir", str(self.run)],
                              capture_output=True, text=True, timeout=60, env={**os.environ, "TZ": "UTC"})

    def kill(self) -> None:
        assert self.proc is not None
        self.proc.send_signal(signal.SIGKILL)
        self.proc.wait(10)

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(30)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(10)

    def status(self) -> dict[str, Any]:
        try:
            return json.loads((self.run / "canal" / "status.json").read_text())
        except (FileNotFoundError, ValueError):
            return {}

    def ha(self) -> dict[str, Any]:
        return self.status().get("ha", {}).get("destinations", {}).get(DEST, {})

    def log(self) -> str:
        try:
            return (self.run / "canal" / "canal.log").read_text()
        except FileNotFoundError:
            return ""

    def log_tail(self) -> str:
        return "\n".join(self.log().splitlines()[-15:])


class Periodic(threading.Thread):
    """A daemon thread that calls step() every ``period`` s until stop(); an exception ends it, and stop() (which
    also calls close() once the thread ended) reports it as ``what`` failed."""

    def __init__(self, name: str, period: float, what: str) -> None:
        super().__init__(name=name, daemon=True)
        self.period = period
        self.what = what
        self.halt = threading.Event()
        self.error: BaseException | None = None

    def step(self) -> None:
        raise NotImplementedError

    def close(self) -> None:
        pass

    def run(self) -> None:
        try:
            while not self.halt.wait(self.period):
                self.step()
        except BaseException as e:  # reported by stop()
            self.error = e

    def stop(self) -> None:
        self.halt.set()
        self.join(10)
        self.close()
        assert self.error is None, f"{self.what} failed: {self.error!r}"


class DumpSampler(Periodic):
    """SHOW PROCESSLIST every ~100 ms as canal_admin: which of our replica ids have a 'Binlog Dump' thread."""

    def __init__(self, settings: Any, slave_ids: set[int]) -> None:
        super().__init__("dump-sampler", 0.1, "processlist sampler")
        self.conn = pymysql.connect(**settings.admin_kwargs())
        self.slave_ids = slave_ids
        self.samples: list[tuple[float, frozenset[int], int]] = []  # (time, ids dumping, our dump threads)

    def _slave_ports(self, cur: Any) -> dict[int, int]:
        cur.execute("SHOW SLAVE HOSTS")
        return {int(r[2]): int(r[0]) for r in cur.fetchall() if int(r[0]) in self.slave_ids}

    def sample(self) -> tuple[float, frozenset[int], int]:
        with self.conn.cursor() as cur:
            # registrations before and after: a dump thread registers before it dumps, so it is in one of them
            ports = self._slave_ports(cur)
            cur.execute("SHOW PROCESSLIST")
            rows = cur.fetchall()
            t = time.time()
            ports.update(self._slave_ports(cur))
        ours = [ports[int(r[2].rsplit(":", 1)[1])] for r in rows
                if r[1] == "canal" and str(r[4]).startswith("Binlog Dump") and ":" in str(r[2])
                and int(r[2].rsplit(":", 1)[1]) in ports]
        return t, frozenset(ours), len(ours)

    def step(self) -> None:
        self.samples.append(self.sample())

    def close(self) -> None:
        self.conn.close()

    def max_dumpers(self) -> int:
        return max((n for _, _, n in self.samples), default=0)

    def last_seen(self, slave_id: int, before: float | None = None) -> float | None:
        times = [t for t, ids, _ in self.samples if slave_id in ids and (before is None or t < before)]
        return max(times, default=None)

    def first_seen(self, slave_id: int, after: float) -> float | None:
        return min((t for t, ids, _ in self.samples if slave_id in ids and t > after), default=None)


class CursorSampler(Periodic):
    """The client's ZooKeeper cursor every ~100 ms: every distinct value, in order."""

    def __init__(self, zk: KazooClient) -> None:
        super().__init__("cursor-sampler", 0.1, "cursor sampler")
        self.zk = zk
        self.path = cursor_path(DEST, CLIENT_ID)
        self.values: list[tuple[float, Pos]] = []

    def read(self) -> Pos | None:
        if not self.zk.exists(self.path):
            return None
        p = json.loads(self.zk.get(self.path)[0])["postion"]
        return str(p["journalName"]), int(p["position"])

    def step(self) -> None:
        pos = self.read()
        if pos is not None and (not self.values or self.values[-1][1] != pos):
            self.values.append((time.time(), pos))


class Inserter(Periodic):
    """A continuous workload: small transactions of 1-3 rows every ~30 ms; ``committed`` holds their ids."""

    def __init__(self, settings: Any, table: str) -> None:
        super().__init__("inserter", 0.03, "workload")
        self.conn = pymysql.connect(**settings.admin_kwargs(autocommit=False))
        self.table = table
        self.next_id = 1
        self.committed: list[int] = []
        self.rng = random.Random(6)

    def step(self) -> None:
        ids = list(range(self.next_id, self.next_id + self.rng.randint(1, 3)))
        with self.conn.cursor() as cur:
            cur.executemany(f"INSERT INTO {self.table} VALUES (%s, %s)", [(i, f"r{i}") for i in ids])
        self.conn.commit()
        self.next_id += len(ids)
        self.committed.extend(ids)

    def close(self) -> None:
        self.conn.close()


@dataclass
class Batch:
    server: str
    batch_id: int
    ids: list[int]
    first_row: Pos | None  # the first row's position
    last_commit: Pos | None  # the last transaction end's position
    acked: bool = False


@dataclass
class Consumer:
    """A ClusterConnector over ServerDiscovery, on its own thread: get, record, ack; errors reconnect."""

    zk: str
    table: str
    batches: list[Batch] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)
    halt: threading.Event = field(default_factory=threading.Event)

    def __post_init__(self) -> None:
        self.discovery = ServerDiscovery(self.zk, DEST, session_timeout_ms=10_000)
        self.discovery.start()
        self.conn = ClusterConnector(self.discovery, DEST, client_id=CLIENT_ID, retries=3, backoff=0.3,
                                     max_backoff=1.0, so_timeout=10, connect_timeout=2)
        self.subscribed = threading.Event()
        self.thread = threading.Thread(target=self._run, name="consumer", daemon=True)
        self.thread.start()

    def delivered(self) -> set[int]:
        return {i for b in list(self.batches) for i in b.ids}

    def _record(self, msg: Any) -> Batch:
        addr = self.conn.address
        server = f"{addr[0]}:{addr[1]}" if addr else "?"
        b = Batch(server, msg.batch_id, [], None, None)
        schema, table = self.table.split(".")
        for e in msg.entries:
            pos = (e.header.logfileName, int(e.header.logfileOffset))
            if e.entryType == ep.TRANSACTIONEND:
                b.last_commit = pos
            elif e.entryType == ep.ROWDATA and e.header.tableName == table and e.header.schemaName == schema:
                rc = ep.RowChange.FromString(e.storeValue)
                if rc.eventType == ep.INSERT:
                    b.first_row = b.first_row or pos
                    b.ids.extend(int(next(c.value for c in rd.afterColumns if c.name == "id"))
                                 for rd in rc.rowDatas)
        return b

    def _run(self) -> None:
        while not self.halt.is_set():
            try:
                if not self.subscribed.is_set():
                    self.conn.subscribe()
                    self.subscribed.set()
                msg = self.conn.get_without_ack(200, 200)
                if msg.empty:
                    continue
                b = self._record(msg)
                self.batches.append(b)
                self.conn.ack(msg.batch_id)
                b.acked = True  # a refusal would surface at the next request; then it comes again anyway
            except CanalClientError as e:
                self.errors.append(str(e))
                time.sleep(0.2)

    def close(self) -> None:
        self.halt.set()
        self.thread.join(30)
        self.conn.disconnect()
        self.discovery.stop()


# ---- fixtures and shared steps ---------------------------------------------------------------------


@pytest.fixture
def ha_table(admin_conn: Any, request: pytest.FixtureRequest) -> Iterator[str]:
    table = f"canal_test.ha_{request.node.name.split('_')[1]}_{random.randint(0, 99999)}"
    with admin_conn.cursor() as cur:
        cur.execute(f"CREATE TABLE {table} (id INT PRIMARY KEY, v VARCHAR(16))")
    yield table
    with admin_conn.cursor() as cur:
        cur.execute(f"DROP TABLE IF EXISTS {table}")


def slave_ids() -> tuple[int, int]:
    base = random.randint(1 << 20, (1 << 31) - 3)
    return base, base + 1


def start_pair(a: HaServer, b: HaServer, zk: KazooClient) -> None:
    """a first (it becomes active), then b (standby)."""
    a.start()
    wait_for(lambda: running_address(zk, DEST) == a.address, 15, f"{a.name} active")
    wait_for(lambda: a.status().get("destinations", {}).get(DEST, {}).get("state") == "running", 10,
             f"{a.name} running {DEST}")
    b.start()
    wait_for(lambda: b.status().get("destinations", {}).get(DEST, {}).get("state") == "standby", 10,
             f"{b.name} standby")


def table_ids(settings: Any, table: str) -> set[int]:
    conn = pymysql.connect(**settings.admin_kwargs())
    try:
        with conn.cursor() as cur:
            cur.execute(f"SELECT id FROM {table}")
            return {int(r[0]) for r in cur.fetchall()}
    finally:
        conn.close()


def drain(consumer: Consumer, settings: Any, table: str, timeout: float = 30) -> set[int]:
    want = table_ids(settings, table)
    wait_for(lambda: want <= consumer.delivered(), timeout,
             f"every inserted row delivered ({len(want - consumer.delivered())} missing)", step=0.2)
    return want


def check_cursor(cursors: CursorSampler, zk: KazooClient, consumer: Consumer) -> dict[str, Any]:
    """Monotonic, at or past the last acked transaction end once flushed, and Canal's JSON."""
    values = [p for _, p in cursors.values]
    assert values, "no cursor was ever written"
    assert all(x <= y for x, y in itertools.pairwise(values)), f"cursor went backwards: {values}"
    last_commit = max(b.last_commit for b in consumer.batches if b.acked and b.last_commit)
    wait_for(lambda: (cursors.read() or ("", 0)) >= last_commit, 5, f"cursor flushed past {last_commit}")
    raw = json.loads(zk.get(cursor_path(DEST, CLIENT_ID))[0])
    assert raw["@type"] == "com.alibaba.otter.canal.protocol.position.LogPosition"
    p = raw["postion"]
    assert {"journalName", "position", "serverId", "timestamp"} <= set(p)
    assert p["journalName"].startswith("mysql-bin.") and p["position"] > 4 and p["serverId"] > 0
    assert p["timestamp"] > 1_600_000_000_000  # ms
    assert "identity" in raw and "sourceAddress" in raw["identity"]
    return raw


@contextmanager
def _flowing(a: HaServer, b: HaServer, zk: KazooClient, zk_chroot: str, settings: Any,
             table: str) -> Iterator[tuple[Consumer, Inserter, CursorSampler]]:
    """a active and b its standby, a consumer subscribed, rows being inserted, and at least 50 of them and a cursor
    through a; afterwards the inserter, the consumer, the cursor sampler and both servers are stopped."""
    cursors = CursorSampler(zk)
    consumer: Consumer | None = None
    inserter = Inserter(settings, table)
    try:
        start_pair(a, b, zk)
        cursors.start()
        consumer = Consumer(zk_chroot, table)
        wait_for(consumer.subscribed.is_set, 15, "consumer subscribed")
        inserter.start()
        wait_for(lambda: len(consumer.delivered()) >= 50 and cursors.values, 20, "rows through a and a cursor")
        yield consumer, inserter, cursors
    finally:
        inserter.halt.set()
        if consumer is not None:
            consumer.close()
        cursors.stop()
        for s in (a, b):
            s.stop()


# ---- failover -------------------------------------------------------------------------------------


@pytest.mark.timeout(240)
def test_sigkill_of_the_active_fails_over_within_10s_and_loses_nothing(
        mariadb_settings: Any, zk_chroot: str, zk: KazooClient, ha_table: str, tmp_path: Path) -> None:
    sa, sb = slave_ids()
    a = HaServer(tmp_path, "a", zk_chroot, mariadb_settings, ha_table, slave_id=sa)
    b = HaServer(tmp_path, "b", zk_chroot, mariadb_settings, ha_table, slave_id=sb)
    dumps = DumpSampler(mariadb_settings, {sa, sb})
    dumps.start()
    try:
        with _flowing(a, b, zk, zk_chroot, mariadb_settings, ha_table) as (consumer, inserter, cursors):
            time.sleep(1.0)

            killed_at = time.time()
            a.kill()
            cursor_at_kill = cursors.read()  # nobody can write it until b is active
            assert cursor_at_kill is not None
            wait_for(lambda: running_address(zk, DEST) == b.address, 10,
                     "b in the running node within 10 s of the kill", step=0.02)
            failover_s = time.time() - killed_at
            print(f"\nfailover: b holds {DEST}/running {failover_s:.2f} s after the SIGKILL")
            wait_for(lambda: any(x.server == b.address for x in consumer.batches), 20, "rows through b")
            time.sleep(2.0)
            inserter.stop()
            want = drain(consumer, mariadb_settings, ha_table)

            assert len(want) == len(inserter.committed) and want == set(inserter.committed)
            assert failover_s < 10
            since = wait_for(lambda: b.ha().get("since"), 5, "b's status names when it became active")
            assert since / 1000 > killed_at
            # b resumed from the ZooKeeper cursor: nothing at or before it came again
            from_b = [x for x in consumer.batches if x.server == b.address and x.first_row]
            assert from_b and min(x.first_row for x in from_b if x.first_row) > cursor_at_kill
            raw = check_cursor(cursors, zk, consumer)
            print(f"cursor: {json.dumps(raw)}")
            dup = len([i for x in consumer.batches for i in x.ids]) - len(consumer.delivered())
            acked_at_a = max(x.last_commit for x in consumer.batches if x.server == a.address and x.acked
                             and x.last_commit)
            print(f"rows: {len(want)} inserted, all delivered, {dup} delivered twice (acked after the last flush: "
                  f"cursor at the kill {cursor_at_kill}, last ack at a {acked_at_a}); "
                  f"processlist samples: {len(dumps.samples)}, at most {dumps.max_dumpers()} dumper(s)")
            assert dumps.last_seen(sa) is not None and dumps.first_seen(sb, killed_at) is not None  # it sees ours
            assert dumps.max_dumpers() <= 1
    finally:
        dumps.stop()
    assert dumps.max_dumpers() <= 1 and len(dumps.samples) > 50
    assert "stopping" in b.log() and "destination hadest stopped: no longer active here" in b.log()


# ---- split brain -------------------------------------------------------------------------------------


@pytest.mark.timeout(240)
def test_active_cut_from_zookeeper_stops_dumping_before_the_standby_starts(
        mariadb_settings: Any, zookeeper: str, zk_chroot: str, zk: KazooClient, ha_table: str,
        tmp_path: Path) -> None:
    host, port = zookeeper.split("/", 1)[0].split(",")[0].rsplit(":", 1)
    proxy = CutProxy((host, int(port)), hold_new=False)
    chroot = zk_chroot[len(zk_chroot.split("/", 1)[0]):]
    sa, sb = slave_ids()
    a = HaServer(tmp_path, "a", f"127.0.0.1:{proxy.port}{chroot}", mariadb_settings, ha_table, slave_id=sa)
    b = HaServer(tmp_path, "b", zk_chroot, mariadb_settings, ha_table, slave_id=sb)
    dumps = DumpSampler(mariadb_settings, {sa, sb})
    dumps.start()  # over the whole test
    try:
        with _flowing(a, b, zk, zk_chroot, mariadb_settings, ha_table) as (consumer, inserter, cursors):
            assert dumps.last_seen(sa) is not None
            time.sleep(1.0)

            cut_at = time.time()
            proxy.cut()  # a loses ZooKeeper; MariaDB and its TCP clients stay reachable
            wait_for(lambda: running_address(zk, DEST) == b.address, 20, "b active after a's session expired",
                     step=0.02)
            b_active = time.time()
            since = wait_for(lambda: b.ha().get("since"), 5, "b's status names when it became active") / 1000
            wait_for(lambda: any(x.server == b.address for x in consumer.batches), 20, "rows through b")
            time.sleep(2.0)
            inserter.stop()
            want = drain(consumer, mariadb_settings, ha_table)
            assert want == set(inserter.committed)
            after_takeover = {i for x in consumer.batches if x.server == b.address for i in x.ids}
            assert len(after_takeover) > 20  # rows kept flowing through b

            # a stopped dumping before b started: its dump connection was gone before b's start and b's first dump
            a_last = dumps.last_seen(sa)
            b_first = dumps.first_seen(sb, cut_at)
            assert a_last is not None and b_first is not None
            a_gone = min(t for t, _, _ in dumps.samples if t > a_last)  # the first sample without it
            assert a_gone < since and a_gone < b_first, (a_gone - cut_at, since - cut_at, b_first - cut_at)
            assert "ZooKeeper connection lost: stopping at once" in a.log()
            print(f"\ncut at 0: a's dump connection gone at +{a_gone - cut_at:.2f} s, "
                  f"b active at +{since - cut_at:.2f} s (running node seen at +{b_active - cut_at:.2f} s), "
                  f"b's dump first seen at +{b_first - cut_at:.2f} s")

            # healed: a reconnects with a new session and stays a standby; still one dumper
            proxy.restore()
            wait_for(lambda: a.status().get("destinations", {}).get(DEST, {}).get("state") == "standby"
                     and a.ha().get("running") == b.address, 20, "a back as a standby")
            time.sleep(1.0)
            assert running_address(zk, DEST) == b.address
            check_cursor(cursors, zk, consumer)
    finally:
        proxy.close()
        dumps.stop()
    print(f"processlist samples: {len(dumps.samples)}, at most {dumps.max_dumpers()} dump connection(s) at once")
    assert dumps.max_dumpers() <= 1 and len(dumps.samples) > 100
    assert dumps.last_seen(sa, before=None) is not None and dumps.first_seen(sa, b_active) is None


# ---- clean SIGTERM -------------------------------------------------------------------------------------


@pytest.mark.timeout(240)
def test_sigterm_flushes_the_cursor_then_releases_to_the_standby(
        mariadb_settings: Any, zk_chroot: str, zk: KazooClient, ha_table: str, tmp_path: Path) -> None:
    # a flush period far longer than the test: only the flush at stop can write the cursor
    sa, sb = slave_ids()
    a = HaServer(tmp_path, "a", zk_chroot, mariadb_settings, ha_table, slave_id=sa, flush_ms=600_000)
    b = HaServer(tmp_path, "b", zk_chroot, mariadb_settings, ha_table, slave_id=sb, flush_ms=600_000)
    consumer: Consumer | None = None
    inserter = Inserter(mariadb_settings, ha_table)
    try:
        start_pair(a, b, zk)
        st = b.cli("status")
        assert st.returncode == 0 and f"{DEST}=standby" in st.stdout and f"HA as {b.address}" in st.stdout
        consumer = Consumer(zk_chroot, ha_table)
        wait_for(consumer.subscribed.is_set, 15, "consumer subscribed")
        inserter.start()
        time.sleep(2.0)
        inserter.halt.set()
        inserter.join(10)
        first = drain(consumer, mariadb_settings, ha_table)
        time.sleep(0.5)  # the last ack has reached a
        assert not zk.exists(cursor_path(DEST, CLIENT_ID))  # nothing flushed yet

        assert a.proc is not None
        a.proc.send_signal(signal.SIGTERM)  # what `canal-server stop` sends (a is our child: we reap it)
        assert a.proc.wait(30) == 0
        stopped_at = time.monotonic()
        assert running_address(zk, DEST) != a.address  # released at stop
        last_commit = max(x.last_commit for x in consumer.batches if x.acked and x.last_commit)
        cursor = CursorSampler(zk).read()
        assert cursor is not None and cursor >= last_commit  # the final flush, made while a held the fence
        wait_for(lambda: running_address(zk, DEST) == b.address, 15, "b active")
        took = time.monotonic() - stopped_at
        assert took > 3.5, f"b took over {took:.1f} s after a released: Canal's standby delay is 5 s"

        inserter = Inserter(mariadb_settings, ha_table)
        inserter.next_id = max(first) + 1
        inserter.start()
        time.sleep(1.5)
        inserter.stop()
        want = drain(consumer, mariadb_settings, ha_table)
        ids = [i for x in consumer.batches for i in x.ids]
        assert set(ids) == want and len(ids) == len(want)  # nothing acked came again from b
        log = a.log()
        assert "signal 15: stopping" in log and "destination hadest stopped: no longer active here" in log
    finally:
        inserter.halt.set()
        if consumer is not None:
            consumer.close()
        for s in (a, b):
            s.stop()


# ---- auto scan -------------------------------------------------------------------------------------------


def test_auto_scan_adds_and_removes_monitors(mariadb_settings: Any, zk_chroot: str, zk: KazooClient,
                                             tmp_path: Path) -> None:
    conf = tmp_path / "conf"
    port = free_port()
    conf.mkdir()
    (conf / "canal.properties").write_text(
        f"canal.ip = 127.0.0.1\ncanal.port = {port}\ncanal.destinations = d1\n"
        "canal.auto.scan = true\ncanal.auto.scan.interval = 1\n"
        f"canal.zkServers = {zk_chroot}\ncanal.zookeeper.session.timeout = {SESSION_MS}\n"
        "canal.instance.global.spring.xml = classpath:spring/default-instance.xml\n"
        f"canal.file.data.dir = {tmp_path / 'data'}\n")
    sa, sb = slave_ids()

    def destination(name: str, slave_id: int) -> None:
        (conf / name).mkdir()
        (conf / name / "instance.properties").write_text(
            f"canal.instance.mysql.slaveId = {slave_id}\n"
            f"canal.instance.master.address = {mariadb_settings.host}:{mariadb_settings.port}\n"
            "canal.instance.filter.regex = canal_test\\\\.ha_scan_nothing\n")

    destination("d1", sa)
    ctl = CanalController(conf)
    ctl.start()
    try:
        me = f"127.0.0.1:{port}"
        assert ctl.address == me and zk.exists(cluster_path(me))
        wait_for(lambda: running_address(zk, "d1") == me and ctl.server.is_start("d1"), 10, "d1 active")
        destination("d2", sb)
        wait_for(lambda: running_address(zk, "d2") == me and ctl.server.is_start("d2"), 10, "d2 added")
        assert zk.exists(destination_cluster_path("d2", me))
        shutil.rmtree(conf / "d2")
        # the monitor stops the instance, then deletes its running node: removed once both are done
        wait_for(lambda: "d2" not in ctl.monitors and not ctl.server.is_start("d2")
                 and running_address(zk, "d2") is None, 10, "d2 removed")
        assert not zk.exists(destination_cluster_path("d2", me))
        assert ctl.server.is_start("d1")
    finally:
        ctl.stop()
    assert running_address(zk, "d1") is None and not zk.exists(cluster_path(me))
    assert not ctl.server.is_start("d1") and not ctl.monitors
