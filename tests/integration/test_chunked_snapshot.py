"""A large table's initial load in chunks (pipelines/engine/chunked_snapshot.py) through the pipeline: the private
MariaDB, local Spark/Delta, the canal sensor and its runs driven in this process (tests/integration/pipeline_driver.py).

A 6,000-row table is loaded in chunks of 1,000 rows while a workload keeps updating, deleting and inserting its rows
(low keys, high keys, new keys past the end). The first snapshot attempt dies after its second chunk's commit; the
sensor's next attempt resumes after the last key committed, reading no finished chunk again. Then the stream catches
the mirror up and it equals the source row for row. Meanwhile a sampler of information_schema.innodb_trx watches the
load's read-only transactions: none stays open longer than BOUND seconds (a whole-table snapshot holds one for the
whole read).
"""

from __future__ import annotations

import random
import threading
import time
from pathlib import Path
from typing import Any

import pymysql
import pytest

from pipelines.engine import chunked_snapshot as C
from pipelines.engine import lake as L
from pipelines.engine.reconcile import table_columns
from tests.integration.pipeline_driver import Driver, drive_until_idle, make_config, mirror_rows, source_rows

pytestmark = [pytest.mark.integration, pytest.mark.usefixtures("one_spark_session")]

SCHEMA = "canal_chunks"
ROWS = 6_000
CHUNK = 1_000
DIE_AFTER = 2      # the first attempt's chunks committed before it dies
BOUND = 1          # seconds (the server's trx_started has whole seconds): a chunk's transaction only SELECTs its rows


class Workload(threading.Thread):
    """Autocommit changes all over the table until stopped: updates, deletes, inserts of new keys past the end."""

    def __init__(self, settings: Any) -> None:
        super().__init__(name="workload", daemon=True)
        self.conn = pymysql.connect(**settings.admin_kwargs(autocommit=True))
        self.stop = threading.Event()
        self.changes = 0
        self.error: BaseException | None = None

    def run(self) -> None:
        rnd, new = random.Random(17), ROWS + 1
        try:
            with self.conn.cursor() as cur:
                while not self.stop.is_set():
                    k = rnd.randint(1, ROWS)
                    what = rnd.random()
                    if what < 0.5:
                        cur.execute(f"UPDATE {SCHEMA}.big SET name = CONCAT('u', %s), amount = amount + 1 "
                                    "WHERE id = %s", (self.changes, k))
                    elif what < 0.7:
                        cur.execute(f"DELETE FROM {SCHEMA}.big WHERE id = %s", (k,))
                    else:
                        cur.execute(f"INSERT INTO {SCHEMA}.big VALUES (%s, %s, %s, 1.50)", (new, k % 7, f"new {new}"))
                        new += 1
                    self.changes += 1
                    time.sleep(0.02)
        except BaseException as e:
            self.error = e
        finally:
            self.conn.close()


class TrxSampler(threading.Thread):
    """Every 150 ms: how long each open read-only InnoDB transaction has been open, by the server's own clock
    (trx_started, whole seconds). The oldest seen is what the source held."""

    def __init__(self, settings: Any) -> None:
        super().__init__(name="innodb_trx", daemon=True)
        self.conn = pymysql.connect(**settings.admin_kwargs(autocommit=True))
        self.stop = threading.Event()
        self.samples = 0       # samples that saw a read-only transaction
        self.longest = 0
        self.oldest: Any = None   # (age, connection id, statement) of the oldest seen

    def run(self) -> None:
        with self.conn.cursor() as cur:
            while not self.stop.is_set():
                cur.execute("SELECT NOW(), trx_started, trx_is_read_only, trx_mysql_thread_id, trx_query "
                            "FROM information_schema.innodb_trx")
                for now, started, read_only, thread, query in cur.fetchall():
                    if not read_only:
                        continue
                    self.samples += 1
                    age = int((now - started).total_seconds())
                    if age > self.longest:
                        self.longest, self.oldest = age, (age, thread, query)
                time.sleep(0.15)   # InnoDB refreshes the table only when nobody read it for 100 ms
        self.conn.close()


@pytest.mark.timeout(900)
def test_a_large_table_loads_in_chunks_resumes_and_converges(mariadb_settings: Any, tmp_path: Path, spark: Any,
                                                             monkeypatch: pytest.MonkeyPatch) -> None:
    admin = pymysql.connect(**mariadb_settings.admin_kwargs(autocommit=True))
    with admin.cursor() as cur:
        cur.execute(f"DROP DATABASE IF EXISTS {SCHEMA}")
        cur.execute(f"CREATE DATABASE {SCHEMA}")
        cur.execute(f"CREATE TABLE {SCHEMA}.big (id BIGINT PRIMARY KEY, grp INT, name VARCHAR(40), "
                    "amount DECIMAL(10,2))")
        cur.execute(f"INSERT INTO {SCHEMA}.big SELECT seq, seq % 7, CONCAT('row ', seq), seq / 100 "
                    f"FROM {SCHEMA}.seq_1_to_{ROWS}")
        cur.execute(f"ANALYZE TABLE {SCHEMA}.big")
    admin.close()

    # the chunks each attempt read and committed, and the first attempt's death after DIE_AFTER commits
    reads: list[tuple[int, Any, Any, int]] = []          # (attempt, after, last, rows)
    held: list[float] = []
    commits: list[tuple[int, int]] = []                  # (attempt, chunk index)
    attempt = [0]
    real_read, real_append = C.read_chunk, L.append_chunk

    def read_chunk(*a: Any, **kw: Any) -> C.ChunkRead:
        c = real_read(*a, **kw)
        reads.append((attempt[0], c.after, c.last, c.rows))
        held.append(c.held_seconds)
        return c

    def append_chunk(*a: Any, **kw: Any) -> None:
        real_append(*a, **kw)
        commits.append((attempt[0], len(commits)))
        if attempt[0] == 1 and len(commits) == DIE_AFTER:
            raise RuntimeError("the snapshot run dies here (test)")

    monkeypatch.setattr(C, "read_chunk", read_chunk)
    monkeypatch.setattr(L, "append_chunk", append_chunk)

    cfg = make_config(tmp_path, mariadb_settings, "chunks", f"{SCHEMA}\\\\..*",
                      snapshot={"chunk_rows": CHUNK, "chunked_above_rows": 1000})
    driver = Driver(cfg, tmp_path / "home")
    work, trx = Workload(mariadb_settings), TrxSampler(mariadb_settings)
    trx.start()
    # the sampler sees a read-only transaction held for two seconds (one it never sees was shorter than 0.15 s)
    control = pymysql.connect(**mariadb_settings.admin_kwargs())
    with control.cursor() as cur:
        cur.execute("START TRANSACTION WITH CONSISTENT SNAPSHOT, READ ONLY")
        cur.execute(f"SELECT COUNT(*) FROM {SCHEMA}.big")
        time.sleep(2.5)
    control.rollback()
    control.close()
    time.sleep(0.2)
    assert trx.samples > 0 and trx.longest >= 2, (trx.samples, trx.oldest)
    trx.samples, trx.longest, trx.oldest = 0, 0, None
    work.start()
    try:
        def snapshots() -> list[bool]:
            return [ok for rr, ok in driver.runs if rr.tags.get("canal/kind") == "snapshot"]

        for n in (1, 2):   # the first snapshot attempt dies; the sensor launches the next one at a later tick
            attempt[0] = n
            deadline = time.monotonic() + 300
            while len(snapshots()) < n:
                assert time.monotonic() < deadline, f"no snapshot run for attempt {n}; cursor {driver.cursor}"
                driver.tick()
        assert snapshots() == [False, True]
        time.sleep(2)
    finally:
        work.stop.set()
        work.join(30)
        trx.stop.set()
        trx.join(30)
    assert work.error is None, work.error
    assert work.changes > 200, work.changes

    # resumed after the last committed key: no finished chunk read again
    first = [r for r in reads if r[0] == 1]
    second = [r for r in reads if r[0] == 2]
    committed_last = first[DIE_AFTER - 1][2]
    assert first[0][1] is None and second[0][1] == committed_last, (first, second[:1])
    assert all(r[1] is not None and r[1] >= committed_last for r in second)
    assert sum(r[3] for r in first[:DIE_AFTER]) == DIE_AFTER * CHUNK
    assert len([c for c in commits if c[0] == 2]) >= (ROWS - DIE_AFTER * CHUNK) // CHUNK

    # every chunk transaction short: by the server's clock, and by the reader's
    assert trx.longest <= BOUND, (trx.oldest, max(held))
    assert max(held) <= BOUND, held
    print(f"{len(reads)} chunk reads, {work.changes} workload changes, oldest read-only transaction seen "
          f"{trx.longest} s ({trx.samples} samples saw one), chunks held theirs {max(held):.3f} s at most")

    # the stream catches the mirror up from the load's begin position: equal to the source, row for row
    driver.runs[:] = [(rr, ok) for rr, ok in driver.runs if ok]   # (the attempt that died, asserted above)
    drive_until_idle(driver, timeout=300, settle=1)
    cols = table_columns(mariadb_settings.repl_kwargs(), SCHEMA, "big")
    got = mirror_rows(spark, L.Lake(cfg.lake_root).mirror_path(SCHEMA, "big"), cols)
    want = source_rows(mariadb_settings, SCHEMA, "big", cols)
    bad = [k for k in set(got) | set(want) if got.get(k) != want.get(k)]
    assert not bad, (len(bad), bad[:3], [(got.get(k), want.get(k)) for k in bad[:3]])
    assert len(want) > ROWS // 2
