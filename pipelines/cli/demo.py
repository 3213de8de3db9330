"""The demo schema and a steady demo workload on the private MariaDB.

    python -m pipelines.cli.demo create  [--customers N]      (re)create canal_demo with some data
    python -m pipelines.cli.demo workload [--rate TX_PER_S] [--seconds S] [--seed N]
    python -m pipelines.cli.demo counts                          row counts of the demo tables

The workload is an order shop: new customers, orders with their items in one transaction, status
changes, balance updates, cancelled orders deleted with their items, page views (a table without a
primary key: views counted twice, some of them removed again or credited to a customer later, one row of
several identical ones at a time). Connection: canal_admin on the private MariaDB (scripts/mariadb.sh), or
--host/--port/... When the server goes away (a restart) the workload says so, reconnects with backoff (0.5 s
doubling to 5 s), says when it writes again and goes on at its rate from there (what the outage missed is not
made up in a burst); a transaction cut by the outage is not retried.
"""

from __future__ import annotations

import argparse
import json
import random
import re
import signal
import sys
import time
from collections.abc import Callable
from decimal import Decimal
from pathlib import Path
from typing import Any

import pymysql

SCHEMA = "canal_demo"
TABLES = ("customers", "orders", "order_items", "page_views")

DDL = [
    f"CREATE DATABASE IF NOT EXISTS {SCHEMA}",
    f"""CREATE TABLE {SCHEMA}.customers (
        id       INT NOT NULL AUTO_INCREMENT PRIMARY KEY,
        name     VARCHAR(64) NOT NULL,
        email    VARCHAR(128),
        tier     ENUM('free','pro','enterprise') NOT NULL DEFAULT 'free',
        balance  DECIMAL(12,2) NOT NULL DEFAULT 0,
        created  TIMESTAMP(3) NOT NULL DEFAULT CURRENT_TIMESTAMP(3)
    ) DEFAULT CHARSET=utf8mb4""",
    f"""CREATE TABLE {SCHEMA}.orders (
        id          BIGINT UNSIGNED NOT NULL AUTO_INCREMENT PRIMARY KEY,
        customer_id INT NOT NULL,
        status      ENUM('new','paid','shipped','cancelled') NOT NULL DEFAULT 'new',
        amount      DECIMAL(10,2) NOT NULL,
        placed      DATETIME(6) NOT NULL,
        attrs       JSON,
        note        TEXT
    ) DEFAULT CHARSET=utf8mb4""",
    f"""CREATE TABLE {SCHEMA}.order_items (
        order_id BIGINT UNSIGNED NOT NULL,
        line     SMALLINT NOT NULL,
        sku      CHAR(8) NOT NULL,
        qty      INT NOT NULL,
        price    DECIMAL(8,2) NOT NULL,
        PRIMARY KEY (order_id, line)
    ) DEFAULT CHARSET=utf8mb4""",
    f"""CREATE TABLE {SCHEMA}.page_views (
        customer_id INT,
        url         VARCHAR(255) NOT NULL,
        viewed      DATETIME NOT NULL
    ) DEFAULT CHARSET=utf8mb4""",
]

_NAMES = ["Zoë", "Ahmed", "Chen", "Olga", "Kwame", "Sofía", "Yuki", "Lars", "Priya", "Jean-Luc", "Mia", "Omar"]
_SKUS = [f"SKU{n:05d}" for n in range(200)]


RECONNECT_BACKOFF = (0.5, 5.0)  # first wait, longest wait (doubling in between)
PRIVATE_MARIADB_CNF = Path(__file__).resolve().parents[2] / ".runtime" / "mariadb" / "primary" / "my.cnf"


def private_mariadb_port(cnf: Path = PRIVATE_MARIADB_CNF) -> int | None:
    """The private MariaDB's port as its my.cnf says (scripts/mariadb.sh writes it and keeps it across restarts),
    None before its first start."""
    try:
        m = re.search(r"^port\s*=\s*(\d+)", cnf.read_text(), re.MULTILINE)
    except FileNotFoundError:
        return None
    return int(m.group(1)) if m else None


def connect(args: argparse.Namespace | None = None, **kw: Any) -> pymysql.connections.Connection:
    opts: dict[str, Any] = {"host": "127.0.0.1", "port": 3407, "user": "canal_admin", "password": "canal_admin",
                            "charset": "utf8mb4", "autocommit": True,
                            # a server that stops answering is an outage too, not a hang
                            "connect_timeout": 5, "read_timeout": 60, "write_timeout": 60}
    if args is not None:
        opts.update(host=args.host, port=args.port, user=args.user, password=args.password)
    opts.update(kw)
    return pymysql.connect(**opts)


def create(conn: pymysql.connections.Connection, customers: int = 200, seed: int = 7) -> None:
    rnd = random.Random(seed)
    with conn.cursor() as cur:
        cur.execute(f"DROP DATABASE IF EXISTS {SCHEMA}")
        for stmt in DDL:
            cur.execute(stmt)
        cur.executemany(
            f"INSERT INTO {SCHEMA}.customers (name, email, tier, balance) VALUES (%s, %s, %s, %s)",
            [(f"{rnd.choice(_NAMES)} {i}", f"user{i}@example.com", rnd.choice(["free", "pro", "enterprise"]),
              Decimal(rnd.randint(0, 100000)) / 100) for i in range(customers)])
    w = Workload(conn, seed=seed)
    for _ in range(customers):
        w.new_order()


class Workload:
    """One transaction at a time, chosen at random; every statement is deterministic given the seed."""

    def __init__(self, conn: pymysql.connections.Connection, seed: int = 1) -> None:
        self.conn = conn
        self.rnd = random.Random(seed)
        self.transactions = 0
        self.rows = 0

    def _ids(self, table: str) -> tuple[int, int] | None:
        with self.conn.cursor() as cur:
            lo, hi = _aggregate(cur, f"SELECT MIN(id), MAX(id) FROM {SCHEMA}.{table}")
        return None if lo is None else (int(lo), int(hi))

    def _tx(self, statements: list[tuple[str, Any]]) -> None:
        with self.conn.cursor() as cur:
            cur.execute("BEGIN")
            try:
                for sql, params in statements:
                    self.rows += cur.execute(sql, params)
                cur.execute("COMMIT")
            except Exception:
                cur.execute("ROLLBACK")
                raise
        self.transactions += 1

    def new_order(self) -> None:
        r = self.rnd
        ids = self._ids("customers")
        cust = r.randint(*ids) if ids else 1
        with self.conn.cursor() as cur:
            cur.execute("BEGIN")
            cur.execute(
                f"INSERT INTO {SCHEMA}.orders (customer_id, amount, placed, attrs, note) VALUES "
                "(%s, %s, NOW(6), %s, %s)",
                (cust, Decimal(r.randint(100, 500000)) / 100, json.dumps(
                    {"channel": r.choice(["web", "app", "store"]), "gift": r.random() < 0.5}),
                 r.choice([None, "leave at the door", "fragile ☂"])))
            oid = cur.lastrowid
            items = [(oid, line, r.choice(_SKUS), r.randint(1, 5), Decimal(r.randint(100, 20000)) / 100)
                     for line in range(1, r.randint(1, 4) + 1)]
            cur.executemany(f"INSERT INTO {SCHEMA}.order_items VALUES (%s, %s, %s, %s, %s)", items)
            cur.execute("COMMIT")
        self.rows += 1 + len(items)
        self.transactions += 1

    def step(self) -> None:
        r = self.rnd
        x = r.random()
        if x < 0.35:
            self.new_order()
        elif x < 0.60:
            ids = self._ids("orders")
            if ids:
                oid = r.randint(*ids)
                self._tx([(f"UPDATE {SCHEMA}.orders SET status = %s, amount = amount + 0.01 WHERE id = %s",
                           (r.choice(["paid", "shipped"]), oid))])
        elif x < 0.70:
            ids = self._ids("orders")
            if ids:
                oid = r.randint(*ids)
                self._tx([(f"DELETE FROM {SCHEMA}.order_items WHERE order_id = %s", (oid,)),
                          (f"DELETE FROM {SCHEMA}.orders WHERE id = %s", (oid,))])
        elif x < 0.80:
            ids = self._ids("customers")
            if ids:
                self._tx([(f"UPDATE {SCHEMA}.customers SET balance = balance + %s, tier = %s WHERE id = %s",
                           (Decimal(r.randint(-5000, 5000)) / 100, r.choice(["free", "pro", "enterprise"]),
                            r.randint(*ids)))])
        elif x < 0.85:
            self._tx([(f"INSERT INTO {SCHEMA}.customers (name, email) VALUES (%s, %s)",
                       (r.choice(_NAMES), None if r.random() < 0.2 else f"new{r.randint(0, 10**9)}@example.com"))])
        elif x < 0.97:
            ids = self._ids("customers")
            views = [(r.randint(*ids) if ids else None, f"/p/{r.randint(1, 50)}") for _ in range(r.randint(1, 3))]
            views += views[:1] if r.random() < 0.3 else []  # a double click: an identical row
            self._tx([(f"INSERT INTO {SCHEMA}.page_views VALUES (%s, %s, NOW())", v) for v in views])
        else:
            self.page_view_fix()

    def page_view_fix(self) -> None:
        """Without a primary key a statement can only name a row by its values: LIMIT 1 changes one of several
        identical rows."""
        r = self.rnd
        with self.conn.cursor() as cur:
            cur.execute(f"SELECT customer_id, url, viewed FROM {SCHEMA}.page_views ORDER BY RAND(%s) LIMIT 1",
                        (r.randint(0, 10**6),))
            row = cur.fetchone()
        if row is None:
            return
        where = "customer_id <=> %s AND url = %s AND viewed = %s"
        ids = self._ids("customers")
        if r.random() < 0.5 or not ids:  # a bot's view, removed
            self._tx([(f"DELETE FROM {SCHEMA}.page_views WHERE {where} LIMIT 1", row)])
        else:  # an anonymous view credited to the customer who logged in
            self._tx([(f"UPDATE {SCHEMA}.page_views SET customer_id = %s WHERE {where} LIMIT 1",
                       (r.randint(*ids), *row))])


def _aggregate(cur: Any, sql: str) -> tuple[Any, ...]:
    """The one row an aggregate query returns."""
    cur.execute(sql)
    row = cur.fetchone()
    if row is None:
        raise RuntimeError(f"{sql}: no row from an aggregate query")
    return tuple(row)


def counts(conn: pymysql.connections.Connection) -> dict[str, int]:
    out = {}
    with conn.cursor() as cur:
        for t in TABLES:
            out[f"{SCHEMA}.{t}"] = int(_aggregate(cur, f"SELECT COUNT(*) FROM {SCHEMA}.{t}")[0])
    return out


class _Stop:
    """Set by SIGTERM / SIGINT: the workload ends after the transaction in progress."""

    def __init__(self) -> None:
        self.requested = False
        signal.signal(signal.SIGTERM, self.request)
        signal.signal(signal.SIGINT, self.request)

    def request(self, *_: Any) -> None:
        self.requested = True

    def sleep(self, seconds: float) -> None:
        end = time.monotonic() + seconds
        while not self.requested and time.monotonic() < end:
            time.sleep(min(0.1, max(0.0, end - time.monotonic())))


def _connected(conn: pymysql.connections.Connection) -> bool:
    try:
        conn.ping(reconnect=False)
        return True
    except Exception:
        return False


def run_workload(connect_fn: Callable[[], pymysql.connections.Connection], rate: float, seconds: float | None,
                 seed: int, where: str = "the source") -> Workload | None:
    """``rate`` transactions per second (for ``seconds``, or until SIGTERM/SIGINT) on ``connect_fn()``'s
    connection; while the source is unreachable, a new connection every 0.5 s, 1 s, 2 s ... 5 s. None when
    stopped before the first connection."""
    stop = _Stop()
    t0 = time.monotonic()
    w: Workload | None = None
    down: float | None = None  # since when the source is unreachable
    wait = RECONNECT_BACKOFF[0]
    base_t, base_tx = t0, 0  # the schedule: base_tx + rate * (now - base_t) transactions by now
    while not stop.requested and (seconds is None or time.monotonic() - t0 < seconds):
        if w is None or down is not None:
            try:
                conn = connect_fn()
            except (pymysql.err.OperationalError, pymysql.err.InterfaceError, OSError) as e:
                if down is None:
                    down = time.monotonic()
                    print(f"{where} unreachable ({type(e).__name__}: {e}); reconnecting with backoff", flush=True)
                stop.sleep(wait)
                wait = min(RECONNECT_BACKOFF[1], wait * 2)
                continue
            if w is None:
                w = Workload(conn, seed=seed)
            else:
                w.conn = conn
            base_t, base_tx, wait = time.monotonic(), w.transactions, RECONNECT_BACKOFF[0]
            if down is not None:  # the rate goes on from now: what the outage missed is not made up
                print(f"{where} back after {base_t - down:.1f} s: writing again at {rate:g} transactions/s "
                      f"({w.transactions} so far)", flush=True)
                down = None
        try:
            w.step()
        except (pymysql.err.OperationalError, pymysql.err.InterfaceError, OSError) as e:
            if _connected(w.conn):  # the statement failed (a deadlock, a lock wait), not the connection
                print(f"transaction failed ({e}); going on", flush=True)
                continue
            down = time.monotonic()
            print(f"{where} unreachable ({type(e).__name__}: {e}); reconnecting with backoff", flush=True)
            try:
                w.conn.close()
            except Exception:  # already broken
                pass
            continue
        lag = (w.transactions - base_tx) / rate - (time.monotonic() - base_t)
        if lag > 0:
            stop.sleep(lag)
    return w


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m pipelines.cli.demo", description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("command", choices=["create", "workload", "counts"])
    ap.add_argument("--host", default="127.0.0.1")
    ap.add_argument("--port", type=int, default=3407)
    ap.add_argument("--user", default="canal_admin")
    ap.add_argument("--password", default="canal_admin")
    ap.add_argument("--customers", type=int, default=200)
    ap.add_argument("--rate", type=float, default=20.0, help="transactions per second")
    ap.add_argument("--seconds", type=float, default=None)
    ap.add_argument("--seed", type=int, default=int(time.time()))
    args = ap.parse_args(argv)
    if args.command == "workload":
        w = run_workload(lambda: connect(args), args.rate, args.seconds, args.seed,
                         where=f"source {args.host}:{args.port}")
        if w is not None:
            w.conn.close()
            print(f"done: {w.transactions} transactions, {w.rows} rows changed")
        return 0
    conn = connect(args)
    try:
        if args.command == "create":
            create(conn, args.customers)
            print(f"created {SCHEMA}: " + ", ".join(f"{k}={v}" for k, v in counts(conn).items()))
        else:
            for k, v in counts(conn).items():
                print(f"{k}\t{v}")
    finally:
        conn.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
