"""A large table's initial load in chunks (pipelines/engine/chunked_snapshot.py) through the pipeline: the private
MariaDB, local Spark/Delta, the canal sensor and its runs driven in this process (tests/integration/pipeline_driver.py).

A 6,000-row table is loaded in chunks of 500 rows by two reader processes, its keys cut into eight segments, while a
workload keeps updating, deleting and inserting its rows (low keys, high keys, new keys past the end). The first
snapshot attempt dies half way, after its sixth chunk's commit; the sensor's next attempt resumes each segment after
the last key committed in it, reading no finished chunk again. Then the stream catches
the mirror up and it equals the source row for row. Meanwhile a sampler of information_schema.innodb_trx watches the
load's read-only transactions: none stays open longer than BOUND seconds (a whole-table snapshot holds one for the
whole read).

The same test at 20M rows (a documented command, not in the suite; figures in BENCHMARKS.md):

    CANAL_TEST_CHUNKED_ROWS=20000000 CANAL_TEST_CHUNK_ROWS=500000 scripts/test.sh -n 0 -s \
        tests/integration/test_chunked_snapshot.py

There the first attempt dies half way (after 20 of 40 chunks), a chunk may hold its transaction CHUNK / 25,000
seconds, and the final comparison is by aggregates each server computes itself (count, sum of keys, sum of every
row's CRC32) instead of row by row.
"""

from __future__ import annotations

import itertools
import os
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
ROWS = int(os.environ.get("CANAL_TEST_CHUNKED_ROWS") or 6_000)
CHUNK = int(os.environ.get("CANAL_TEST_CHUNK_ROWS") or 500)
LARGE = ROWS > 100_000   # compared by aggregates, not row by row in Python
READERS = 2
SEGMENTS = 8       # four per reader (the table is at least eight chunks)
DIE_AFTER = ROWS // CHUNK // 2   # the first attempt's chunks committed before it dies: half way
# seconds (the server's trx_started has whole seconds): a chunk's transaction only SELECTs its rows
BOUND = max(1, CHUNK // 25_000)


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


@pytest.mark.timeout(7200 if LARGE else 900)
def test_a_large_table_loads_in_chunks_resumes_and_converges(mariadb_settings: Any, tmp_path: Path, spark: Any,
                                                             monkeypatch: pytest.MonkeyPatch) -> None:
    admin = pymysql.connect(**mariadb_settings.admin_kwargs(autocommit=True))
    with admin.cursor() as cur:
        cur.execute(f"DROP DATABASE IF EXISTS {SCHEMA}")
        cur.execute(f"CREATE DATABASE {SCHEMA}")
        cur.execute(f"CREATE TABLE {SCHEMA}.big (id BIGINT PRIMARY KEY, grp INT, name VARCHAR(40), "
                    "amount DECIMAL(10,2))")
        for lo in range(1, ROWS + 1, 1_000_000):
            cur.execute(f"INSERT INTO {SCHEMA}.big SELECT seq, seq % 7, CONCAT('row ', seq), seq / 100 "
                        f"FROM {SCHEMA}.seq_{lo}_to_{min(ROWS, lo + 999_999)}")
        cur.execute(f"ANALYZE TABLE {SCHEMA}.big")
    admin.close()

    # the chunks each attempt committed (seen in the load's process, after each commit); the first attempt dies
    # after DIE_AFTER of them
    chunks: list[tuple[int, C.ChunkRead]] = []
    attempt = [0]
    real_load = C.load_in_chunks

    def load_in_chunks(*a: Any, on_chunk: Any = None, **kw: Any) -> C.ChunkedResult:
        def seen(c: C.ChunkRead) -> None:
            chunks.append((attempt[0], c))
            if on_chunk is not None:
                on_chunk(c)
            if attempt[0] == 1 and len(chunks) == DIE_AFTER:
                raise RuntimeError("the snapshot run dies here (test)")
        return real_load(*a, on_chunk=seen, **kw)

    monkeypatch.setattr(C, "load_in_chunks", load_in_chunks)

    cfg = make_config(tmp_path, mariadb_settings, "chunks", f"{SCHEMA}\\\\..*",
                      snapshot={"chunk_rows": CHUNK, "chunked_above_rows": 1000, "readers": READERS})
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

    # eight segments, contiguous
    first = [c for n, c in chunks if n == 1]
    second = [c for n, c in chunks if n == 2]
    assert len(first) == DIE_AFTER
    bounds = {c.segment: c.upto for c in first + second}
    assert sorted(bounds) == list(range(SEGMENTS)), bounds
    assert all(bounds[i] < bounds[i + 1] for i in range(SEGMENTS - 1)), bounds
    # resumed: each segment's first chunk of the second attempt starts after the last key the first committed in
    # it (or at the segment's start), and no finished chunk is read again
    done = {c.segment: c.last for c in first}
    for seg in range(SEGMENTS):
        mine = [c for c in second if c.segment == seg]
        assert mine, f"segment {seg} not read by the second attempt"
        start = done.get(seg, bounds[seg - 1] if seg else None)
        assert mine[0].after == start, (seg, mine[0], start)
        assert [c.index for c in mine] == list(range(mine[0].index, mine[0].index + len(mine)))
        assert all(c.rows == CHUNK for c in mine[:-1]) and mine[-1].rows < CHUNK, (seg, mine)   # read to its end
        assert all(b.after == a.last for a, b in itertools.pairwise(mine))   # in key order, no gap
    # read by READERS reader processes, not by the run's own
    readers = {c.reader.split("/")[0] for c in second}
    assert len(readers) == READERS and str(os.getpid()) not in readers, readers

    # every chunk transaction short: by the server's clock, and by the reader's
    held = [c.held_seconds for _, c in chunks]
    assert trx.longest <= BOUND, (trx.oldest, max(held))
    assert max(held) <= BOUND, held
    print(f"{len(chunks)} chunks committed, {work.changes} workload changes, oldest read-only transaction seen "
          f"{trx.longest} s ({trx.samples} samples saw one), chunks held theirs {max(held):.3f} s at most")

    # the stream catches the mirror up from the load's begin position: equal to the source, row for row
    driver.runs[:] = [(rr, ok) for rr, ok in driver.runs if ok]   # (the attempt that died, asserted above)
    drive_until_idle(driver, timeout=3600 if LARGE else 300, settle=1)
    if LARGE:
        sums = ("COUNT(*)", "SUM(id)", "SUM(CRC32(CONCAT_WS('|', id, grp, name, amount)))")
        admin = pymysql.connect(**mariadb_settings.admin_kwargs(autocommit=True))
        with admin.cursor() as cur:
            cur.execute(f"SELECT {', '.join(sums)} FROM {SCHEMA}.big")
            want_sums = tuple(int(v) for v in cur.fetchone())
        admin.close()
        mirror = spark.read.format("delta").load(L.Lake(cfg.lake_root).mirror_path(SCHEMA, "big"))
        got_sums = tuple(int(v) for v in mirror.selectExpr(*[e.replace("CRC32(", "crc32(") for e in sums]).first())
        print(f"source {want_sums}, mirror {got_sums}")
        assert got_sums == want_sums and want_sums[0] > ROWS // 2
        return
    cols = table_columns(mariadb_settings.repl_kwargs(), SCHEMA, "big")
    got = mirror_rows(spark, L.Lake(cfg.lake_root).mirror_path(SCHEMA, "big"), cols)
    want = source_rows(mariadb_settings, SCHEMA, "big", cols)
    bad = [k for k in set(got) | set(want) if got.get(k) != want.get(k)]
    assert not bad, (len(bad), bad[:3], [(got.get(k), want.get(k)) for k in bad[:3]])
    assert len(want) > ROWS // 2
