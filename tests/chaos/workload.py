"""The chaos workload: transactions of every kind on its own schema, each logged with its outcome.

Tables: ``accounts`` (primary key ``id``, changed by UPDATEs of the key too), ``transfers`` (a two-column primary
key, re-keyed with its account) and ``audit`` (no primary key, identical rows on purpose, changed one copy at a
time with LIMIT 1). Transactions: inserts of several rows, transfers touching all three tables, key changes,
closes (deletes), multi-row updates, bulk inserts, one-copy fixes of the keyless table, and transactions that are
rolled back (their rows carry ``ROLLBACK_MARK``, so any trace of them is easy to find).

Every transaction is a line of ``workload.jsonl``: its number, time, kind, outcome and rows changed (the affected
rows the server reported, which is what the binlog holds) and, when committed, its GTID (``@@last_gtid``). A
connection lost before COMMIT was sent aborts the transaction (the server rolls it back); lost while COMMIT was in
flight, the outcome is ``unknown``: the source is the truth for those rows. The workload reconnects with backoff
and goes on; targets are always read from the source, so an unknown outcome never misleads it.
"""

from __future__ import annotations

import json
import random
import threading
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from decimal import Decimal
from pathlib import Path
from typing import Any

import pymysql

from .environment import SCHEMA

ROLLBACK_MARK = "rolled back: must leave no trace"
TABLES = ("accounts", "transfers", "audit")
KEYLESS = ("audit",)

DDL = [
    f"CREATE DATABASE {SCHEMA}",
    f"""CREATE TABLE {SCHEMA}.accounts (
        id      INT NOT NULL PRIMARY KEY,
        owner   VARCHAR(64) NOT NULL,
        balance DECIMAL(12,2) NOT NULL,
        version INT NOT NULL,
        flag    TINYINT NULL,
        changed DATETIME NOT NULL,
        memo    VARCHAR(255) NULL
    ) DEFAULT CHARSET=utf8mb4""",
    f"""CREATE TABLE {SCHEMA}.transfers (
        account_id INT NOT NULL,
        seq        INT NOT NULL,
        amount     DECIMAL(12,2) NOT NULL,
        state      ENUM('new','done','void') NOT NULL,
        ref        BIGINT UNSIGNED NOT NULL,
        PRIMARY KEY (account_id, seq)
    ) DEFAULT CHARSET=utf8mb4""",
    f"""CREATE TABLE {SCHEMA}.audit (
        account_id INT NULL,
        action     VARCHAR(16) NOT NULL,
        amount     INT NOT NULL
    ) DEFAULT CHARSET=utf8mb4""",
]

_OWNERS = ["Zoë", "Ahmed", "Chen", "Olga", "Kwame", "Sofía", "Yuki", "Lars", "Priya", "Jean-Luc", "Mia ☂", "Omar"]
CONNECTION_ERRORS = (pymysql.err.OperationalError, pymysql.err.InterfaceError, OSError)
KINDS = ("open", "transfer", "rekey", "close", "bulk_update", "bulk_insert", "audit_fix", "rollback")
_WEIGHTS = (14, 30, 8, 8, 6, 3, 16, 15)


def create_schema(conn: pymysql.connections.Connection, accounts: int, seed: int) -> None:
    """The schema with ``accounts`` accounts, a transfer each and some audit rows (identical ones among them)."""
    rnd = random.Random(seed)
    with conn.cursor() as cur:
        cur.execute(f"DROP DATABASE IF EXISTS {SCHEMA}")
        for stmt in DDL:
            cur.execute(stmt)
        cur.executemany(f"INSERT INTO {SCHEMA}.accounts VALUES (%s, %s, %s, 0, NULL, NOW(), NULL)",
                        [(i, f"{rnd.choice(_OWNERS)} {i}", Decimal(rnd.randint(0, 10**6)) / 100)
                         for i in range(1, accounts + 1)])
        cur.executemany(f"INSERT INTO {SCHEMA}.transfers VALUES (%s, 1, %s, 'new', %s)",
                        [(i, Decimal(rnd.randint(1, 10**5)) / 100, rnd.getrandbits(64))
                         for i in range(1, accounts + 1)])
        rows = [(rnd.randint(1, accounts), "seed", rnd.randint(1, 3)) for _ in range(accounts)]
        cur.executemany(f"INSERT INTO {SCHEMA}.audit VALUES (%s, %s, %s)", rows + rows[: accounts // 4])


@dataclass
class Outcomes:
    """Counts by outcome, and rows changed by committed transactions."""

    by_outcome: Counter[str] = field(default_factory=Counter)
    by_kind: Counter[str] = field(default_factory=Counter)
    committed_rows: int = 0


class _Lost(Exception):
    """The connection went away during a transaction (``during_commit``: the outcome is unknown)."""

    def __init__(self, cause: BaseException, during_commit: bool) -> None:
        super().__init__(str(cause))
        self.cause = cause
        self.during_commit = during_commit


class Workload:
    """Runs in a thread of the suite (``start``/``stop``) at ``rate`` transactions per second."""

    def __init__(self, connect: Callable[[], pymysql.connections.Connection], log: Path, rate: float, seed: int,
                 say: Callable[[str], None]) -> None:
        self.connect = connect
        self.log_path = log
        self.rate = rate
        self.rnd = random.Random(seed)
        self.say = say
        self.outcomes = Outcomes()
        self.n = 0
        self.errors: list[str] = []  # statements that failed for another reason than the connection
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._conn: pymysql.connections.Connection | None = None
        self._next_id = 0
        self._next_seq = 0

    # --- running ------------------------------------------------------------------------------------------------

    def start(self) -> None:
        self._thread = threading.Thread(target=self._run, name="chaos-workload", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(120)
        if self._conn is not None:
            try:
                self._conn.close()
            except Exception:  # already broken
                pass

    def _run(self) -> None:
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        wait, down_since = 0.2, None
        t0 = time.monotonic()
        base_n = 0
        with open(self.log_path, "a", encoding="utf-8") as log:
            while not self._stop.is_set():
                if self._conn is None:
                    try:
                        self._connected()
                    except CONNECTION_ERRORS as e:
                        if down_since is None:
                            down_since = time.monotonic()
                            self.say(f"workload: source unreachable ({type(e).__name__}); reconnecting")
                        self._stop.wait(wait)
                        wait = min(2.0, wait * 2)
                        continue
                    if down_since is not None:
                        self.say(f"workload: source back after {time.monotonic() - down_since:.1f} s")
                    t0, base_n, wait, down_since = time.monotonic(), self.n, 0.2, None
                self._one(log)
                ahead = (self.n - base_n) / self.rate - (time.monotonic() - t0)
                if ahead > 0:
                    self._stop.wait(ahead)

    def _connected(self) -> None:
        conn = self.connect()
        with conn.cursor() as cur:
            cur.execute(f"SELECT COALESCE(MAX(id), 0) FROM {SCHEMA}.accounts")
            top = int(cur.fetchone()[0])
            cur.execute(f"SELECT COALESCE(MAX(seq), 0) FROM {SCHEMA}.transfers")
            seq = int(cur.fetchone()[0])
        # ids never reused, also after an unknown outcome: a key the source may or may not hold is never chosen
        self._next_id = max(self._next_id, top + 1)
        self._next_seq = max(self._next_seq, seq + 1)
        self._conn = conn

    def _one(self, log: Any) -> None:
        kind = self.rnd.choices(KINDS, _WEIGHTS)[0]
        self.n += 1
        entry: dict[str, Any] = {"n": self.n, "t": round(time.time(), 3), "kind": kind}
        try:
            rows, gtid, committed = self._transaction(kind)
        except _Lost as e:
            entry.update(outcome="unknown" if e.during_commit else "aborted", error=f"{type(e.cause).__name__}: {e}")
            self._conn_lost()
        except pymysql.err.MySQLError as e:  # not the connection: the transaction was rolled back
            entry.update(outcome="failed", error=f"{type(e).__name__}: {e}")
            self.errors.append(f"transaction {self.n} ({kind}): {type(e).__name__}: {e}")
        else:
            entry.update(outcome="committed" if committed else "rolled_back", rows=rows, gtid=gtid)
            if committed:
                self.outcomes.committed_rows += rows
        self.outcomes.by_outcome[entry["outcome"]] += 1
        self.outcomes.by_kind[kind] += 1
        log.write(json.dumps(entry, ensure_ascii=False) + "\n")
        log.flush()

    def _conn_lost(self) -> None:
        if self._conn is not None:
            try:
                self._conn.close()
            except Exception:  # already broken
                pass
        self._conn = None

    # --- transactions -------------------------------------------------------------------------------------------

    def _transaction(self, kind: str) -> tuple[int, str | None, bool]:
        """(rows changed, GTID, committed) of one transaction of ``kind``."""
        conn = self._conn
        assert conn is not None
        rows, stage = 0, "statements"
        try:
            with conn.cursor() as cur:
                cur.execute("BEGIN")
                for sql, args in getattr(self, f"_{kind}")(cur):
                    rows += cur.execute(sql, args)
                if kind == "rollback":
                    stage = "rollback"
                    cur.execute("ROLLBACK")
                    return rows, None, False
                stage = "commit"
                cur.execute("COMMIT")
                stage = "committed"
                cur.execute("SELECT @@last_gtid")
                return rows, str(cur.fetchone()[0] or "") or None, True
        except (pymysql.err.MySQLError, OSError) as e:
            if not _is_connection_error(e):  # a statement failed: the connection is fine, undo the rest
                conn.rollback()
                raise
            if stage == "committed":  # committed; only its GTID is not known
                return rows, None, True
            raise _Lost(e, during_commit=stage == "commit") from e

    def _pick(self, cur: Any, sql: str, n: int = 1) -> list[Any]:
        cur.execute(f"{sql} ORDER BY RAND(%s) LIMIT %s", (self.rnd.randint(0, 10**9), n))
        return [r[0] if len(r) == 1 else r for r in cur.fetchall()]

    def _new_id(self) -> int:
        self._next_id += 1
        return self._next_id - 1

    def _new_seq(self) -> int:
        self._next_seq += 1
        return self._next_seq - 1

    def _money(self) -> Decimal:
        return Decimal(self.rnd.randint(1, 10**5)) / 100

    def _open(self, cur: Any) -> list[tuple[str, Any]]:
        r = self.rnd
        rows = [(self._new_id(), f"{r.choice(_OWNERS)} {self.n}", self._money(), r.choice([None, 0, 1]))
                for _ in range(r.randint(1, 3))]
        return [(f"INSERT INTO {SCHEMA}.accounts VALUES " + ", ".join(["(%s, %s, %s, 0, %s, NOW(), NULL)"] * len(rows)),
                 [v for row in rows for v in row])]

    def _transfer(self, cur: Any) -> list[tuple[str, Any]]:
        pair = self._pick(cur, f"SELECT id FROM {SCHEMA}.accounts", 2)
        if len(pair) < 2:
            return self._open(cur)
        a, b = pair
        amount, r = self._money(), self.rnd
        out = [(f"UPDATE {SCHEMA}.accounts SET balance = balance - %s, version = version + 1, changed = NOW() "
                "WHERE id = %s", (amount, a)),
               (f"UPDATE {SCHEMA}.accounts SET balance = balance + %s, version = version + 1, changed = NOW() "
                "WHERE id = %s", (amount, b)),
               (f"INSERT INTO {SCHEMA}.transfers VALUES (%s, %s, %s, 'new', %s)",
                (a, self._new_seq(), amount, r.getrandbits(64))),
               (f"INSERT INTO {SCHEMA}.audit VALUES (%s, 'transfer', %s)", (a, int(amount)))]
        if r.random() < 0.4:  # a double entry: an identical row
            out.append((f"INSERT INTO {SCHEMA}.audit VALUES (%s, 'transfer', %s)", (a, int(amount))))
        return out

    def _rekey(self, cur: Any) -> list[tuple[str, Any]]:
        """The primary key changes: the account's id and its transfers' (account_id, seq) keys with it."""
        old = self._pick(cur, f"SELECT id FROM {SCHEMA}.accounts")
        if not old:
            return self._open(cur)
        new = self._new_id()
        return [(f"UPDATE {SCHEMA}.accounts SET id = %s, version = version + 1 WHERE id = %s", (new, old[0])),
                (f"UPDATE {SCHEMA}.transfers SET account_id = %s WHERE account_id = %s", (new, old[0])),
                (f"UPDATE {SCHEMA}.audit SET account_id = %s WHERE account_id = %s LIMIT 1", (new, old[0]))]

    def _close(self, cur: Any) -> list[tuple[str, Any]]:
        victim = self._pick(cur, f"SELECT id FROM {SCHEMA}.accounts")
        if not victim:
            return self._open(cur)
        return [(f"DELETE FROM {SCHEMA}.transfers WHERE account_id = %s", (victim[0],)),
                (f"DELETE FROM {SCHEMA}.accounts WHERE id = %s", (victim[0],)),
                (f"INSERT INTO {SCHEMA}.audit VALUES (%s, 'close', 0)", (victim[0],))]

    def _bulk_update(self, cur: Any) -> list[tuple[str, Any]]:
        r = self.rnd
        lo = r.randint(0, max(0, self._next_id - 40))
        return [(f"UPDATE {SCHEMA}.accounts SET version = version + 1, flag = %s, memo = %s WHERE id BETWEEN %s AND %s",
                 (r.choice([None, 0, 1]), r.choice([None, f"batch {self.n}", "ünïcödé ☂"]), lo, lo + 30)),
                (f"UPDATE {SCHEMA}.transfers SET state = IF(state = 'new', 'done', 'void') "
                 "WHERE account_id BETWEEN %s AND %s", (lo, lo + 30))]

    def _bulk_insert(self, cur: Any) -> list[tuple[str, Any]]:
        r = self.rnd
        rows = [(r.randint(0, self._next_id) or None, "bulk", r.randint(1, 3)) for _ in range(r.randint(50, 300))]
        return [(f"INSERT INTO {SCHEMA}.audit VALUES " + ", ".join(["(%s, %s, %s)"] * len(rows)),
                 [v for row in rows for v in row])]

    def _audit_fix(self, cur: Any) -> list[tuple[str, Any]]:
        """A row of the keyless table is named by its values: LIMIT 1 changes one of several identical rows."""
        found = self._pick(cur, f"SELECT account_id, action, amount FROM {SCHEMA}.audit")
        if not found:
            return []
        where = "account_id <=> %s AND action = %s AND amount = %s"
        if self.rnd.random() < 0.5:
            return [(f"DELETE FROM {SCHEMA}.audit WHERE {where} LIMIT 1", tuple(found[0]))]
        return [(f"UPDATE {SCHEMA}.audit SET amount = amount + 1 WHERE {where} LIMIT 1", tuple(found[0]))]

    def _rollback(self, cur: Any) -> list[tuple[str, Any]]:
        """Inserts, updates and deletes on every table, then ROLLBACK."""
        ids = self._pick(cur, f"SELECT id FROM {SCHEMA}.accounts", 3)
        out: list[tuple[str, Any]] = [
            (f"INSERT INTO {SCHEMA}.accounts VALUES (%s, %s, 0, 0, NULL, NOW(), %s)",
             (self._new_id(), "nobody", ROLLBACK_MARK)),
            (f"INSERT INTO {SCHEMA}.audit VALUES (NULL, 'rollback', -1)", ())]
        if ids:
            out += [(f"UPDATE {SCHEMA}.accounts SET memo = %s WHERE id = %s", (ROLLBACK_MARK, ids[0])),
                    (f"DELETE FROM {SCHEMA}.transfers WHERE account_id = %s", (ids[-1],))]
        return out


def _is_connection_error(e: BaseException) -> bool:
    """A lost or refused connection (client errors 2000-2999, the server shutting down), not a statement error."""
    if isinstance(e, pymysql.err.InterfaceError | OSError):
        return True
    code = e.args[0] if e.args and isinstance(e.args[0], int) else 0
    return 2000 <= code < 3000 or code in (1053, 1077, 1927)  # shutdown in progress, normal shutdown, killed


def read_log(path: Path) -> list[dict[str, Any]]:
    if not path.exists():
        return []
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]
