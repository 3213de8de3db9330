"""bench/code_server: CPU per row change of the code-server side of the pipeline, stage by stage.

    .venv/bin/python bench/code_server.py [--rows 200000] [--window-rows 100000] [--reuse] [--repeat N]
        [--digest] [--profile DIR]

Workload: bench/pipeline_workload.py's table, DDL and insert/update/delete mix (its functions, imported),
in a schema of its own (``canal_bench_cs``: the pipeline bench's ``canal_bench`` may be live on the same
server), preloaded, then ``--rows`` row changes in ``--tx-rows`` transactions written as fast as the server
takes them. The binlog range is kept in .runtime/bench-code-server.json; ``--reuse`` replays the same range
(same entries, so ``--digest`` output is comparable between two versions of the code).

Then, in this process and in sequence so that process CPU time splits cleanly by stage, the path the Dagster
code server runs for the canal sensor:

0. startup: ``EmbeddedCanalSource`` starts the pipeline's embedded CanalInstance (connection, schema history
   bootstrap) until the first entry is stored; once per process, so not counted per row;
1. parse + encode: the instance (replication dump, binlog decoding, Canal Entry encoding, sink, ring store)
   until every row change is in the store;
2. get: ``EmbeddedCanalSource.get_window`` (getWithoutAck batches) windows of ``--window-rows``;
3. staging: ``pipelines.engine.staging.stage_window`` of each window, as the sensor calls it (Entry parsing, text
   pool, Arrow conversion, Parquet files, manifest; fsyncs included).

Prints CPU seconds (user + system, ``resource.getrusage``) and microseconds per row change for each stage;
``--repeat N`` runs N passes and prints the least and the median (the machine is rarely idle).
``--digest``: also a SHA-256 over the Entry bytes served and over the staged files (Parquet bytes, manifest
without its creation time): equal digests mean equal outputs. ``--profile DIR``: cProfile each stage (the
parser thread with a CPU-time timer) into DIR/<stage>.prof and print the top functions.
"""

from __future__ import annotations

import argparse
import cProfile
import hashlib
import json
import os
import pstats
import random
import resource
import statistics
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

import decode as D  # noqa: E402  (the private MariaDB's address)
import pipeline_workload as W  # noqa: E402

SCHEMA = "canal_bench_cs"
DESTINATION = "bench_cs"
STATE = ROOT / ".runtime" / "bench-code-server.json"
MEMUNIT = 16384
ENTRY_BYTES_PER_ROW = 1100  # bench/pipeline's bound on Canal Entry bytes per row change of this table


def use_schema(schema: str) -> None:
    """Point bench/pipeline_workload's functions at ``schema`` (they read its module globals)."""
    W.DDL = W.DDL.replace(f"CREATE TABLE {W.SCHEMA}.", f"CREATE TABLE {schema}.", 1)
    W.SCHEMA = schema


def master_status() -> tuple[str, int]:
    import pymysql

    conn = pymysql.connect(**W.admin_kwargs(D.HOST, D.PORT))
    try:
        with conn.cursor() as cur:
            cur.execute("SHOW MASTER STATUS")
            file, pos = cur.fetchone()[:2]
            return str(file), int(pos)
    finally:
        conn.close()


def build_workload(rows: int, tx_rows: int, preload: int) -> dict[str, Any]:
    """Preload the table, then write ``rows`` row changes; the binlog range that holds them."""
    W.create_table(D.HOST, D.PORT, preload)
    start_file, start_pos = master_status()
    with open(os.devnull, "w") as out:
        # a rate the server cannot reach: every transaction is due at once, so they follow each other
        rate = 1e6
        summary = W.write(D.HOST, D.PORT, rate=rate, seconds=rows / rate, tx_rows=tx_rows, next_id=preload + 1,
                          out=out)
    end_file, end_pos = master_status()
    st = {"start_file": start_file, "start_pos": start_pos, "end_file": end_file, "end_pos": end_pos,
          "rows": summary["rows"], "transactions": summary["transactions"]}
    STATE.parent.mkdir(parents=True, exist_ok=True)
    STATE.write_text(json.dumps(st))
    return st


def pipeline_config(tmp: Path, st: dict[str, Any], window_rows: int) -> Any:
    """A PipelineConfig for an embedded destination reading the workload's binlog range (as bench/pipeline's)."""
    from pipelines.engine.config import parse_config

    window_bytes = window_rows * ENTRY_BYTES_PER_ROW
    # the whole workload stays in the store: the parse stage ends before anything is taken
    units = 1 << max(1, (2 * st["rows"] * ENTRY_BYTES_PER_ROW // MEMUNIT - 1).bit_length())
    conf = tmp / "conf"
    (conf / DESTINATION).mkdir(parents=True)
    (conf / "canal.properties").write_text(
        f"canal.destinations = {DESTINATION}\ncanal.file.flush.period = 0\ncanal.file.data.dir = {tmp / 'data'}\n")
    (conf / DESTINATION / "instance.properties").write_text(
        f"canal.instance.mysql.slaveId = {random.randint(1 << 20, (1 << 31) - 1)}\n"
        f"canal.instance.master.address = {D.HOST}:{D.PORT}\ncanal.instance.master.sslMode = DISABLED\n"
        "canal.instance.dbUsername = canal\ncanal.instance.dbPassword = canal\n"
        f"canal.instance.master.journal.name = {st['start_file']}\n"
        f"canal.instance.master.position = {st['start_pos']}\n"
        f"canal.instance.filter.regex = {SCHEMA}\\\\..*\n"
        "canal.instance.filter.query.dml = true\n"
        f"canal.instance.memory.buffer.size = {units}\ncanal.instance.memory.buffer.memunit = {MEMUNIT}\n")
    return parse_config({
        "destination": DESTINATION,
        "canal": {"conf_dir": str(conf)},
        "window": {"max_rows": window_rows, "max_bytes": window_bytes, "max_wait_seconds": 1},
        "paths": {"staging": str(tmp / "staging"), "state": str(tmp / "state")},
        "lake": {"root": str(tmp / "lake")},
    }, base_dir=tmp)


def cpu_seconds() -> float:
    ru = resource.getrusage(resource.RUSAGE_SELF)
    return ru.ru_utime + ru.ru_stime


@dataclass
class Stage:
    name: str
    cpu: float = 0.0
    wall: float = 0.0


class Profiler:
    """cProfile per stage when asked; a no-op otherwise."""

    def __init__(self, out: Path | None) -> None:
        self.out = out
        self.parser_profile: cProfile.Profile | None = None

    @contextmanager
    def stage(self, name: str) -> Iterator[None]:
        if self.out is None:
            yield
            return
        prof = cProfile.Profile(time.process_time)
        prof.enable()
        try:
            yield
        finally:
            prof.disable()
            self.dump(prof, name)

    def patch_parser(self) -> None:
        """Profile the parser thread (its own thread: the main thread's profiler does not see it)."""
        if self.out is None:
            return
        from canal_core.parse.parser import EventParser

        original: Callable[[Any], None] = EventParser.run
        self.parser_profile = prof = cProfile.Profile(time.thread_time)

        def run(parser: Any) -> None:
            prof.enable()
            try:
                original(parser)
            finally:
                prof.disable()

        EventParser.run = run  # type: ignore[method-assign]

    def dump(self, prof: cProfile.Profile, name: str) -> None:
        assert self.out is not None
        self.out.mkdir(parents=True, exist_ok=True)
        path = self.out / f"{name}.prof"
        prof.dump_stats(path)
        print(f"\n--- profile of {name} ({path}), by own time ---")
        pstats.Stats(str(path)).sort_stats("tottime").print_stats(25)


def wait_stored(source: Any, rows: int, timeout: float) -> None:
    store = source._instance.store
    deadline = time.monotonic() + timeout
    while store.stats().put_rows < rows:
        if time.monotonic() > deadline:
            raise SystemExit(f"only {store.stats().put_rows} of {rows} row changes reached the store "
                             f"({source.health().problem or 'parser running'})")
        time.sleep(0.05)


def in_range(entry: bytes, st: dict[str, Any]) -> bool:
    """Whether the entry starts before the workload's end position."""
    from canal_core.protocol.proto import EntryProtocol_pb2 as pb

    h = pb.Entry.FromString(entry).header
    return (h.logfileName, h.logfileOffset) < (st["end_file"], st["end_pos"])


def staged_digest(path: Path) -> str:
    """Parquet bytes and the manifest without its creation time, in path order."""
    h = hashlib.sha256()
    for f in sorted(p for p in path.rglob("*") if p.is_file()):
        data = f.read_bytes()
        if f.name == "manifest.json":
            m = json.loads(data)
            m.pop("created_ms", None)
            data = json.dumps(m, sort_keys=True).encode()
        h.update(str(f.relative_to(path)).encode() + b"\0" + data)
    return h.hexdigest()


@dataclass
class Result:
    stages: list[Stage]
    windows: int
    digests: list[str]  # the entries', then each staged window's (when asked)


def run(st: dict[str, Any], window_rows: int, digest: bool, profile: Path | None) -> Result:
    """One pass over the workload: a fresh embedded instance from the workload's start to its end."""
    import pyarrow as pa

    from pipelines.engine.source import EmbeddedCanalSource
    from pipelines.engine.staging import stage_window, window_path

    pa.array(["warm-up"])  # Arrow's first conversion imports pandas: once per process, not per row
    prof = Profiler(profile)
    prof.patch_parser()
    stages = [Stage("startup"), Stage("parse+encode"), Stage("get"), Stage("staging")]
    entries_digest = hashlib.sha256()
    staged: list[str] = []
    with tempfile.TemporaryDirectory(prefix="bench-code-server-") as tmp_name:
        tmp = Path(tmp_name)
        cfg = pipeline_config(tmp, st, window_rows)
        source = EmbeddedCanalSource(cfg)
        try:
            c0, w0 = cpu_seconds(), time.perf_counter()
            source.epoch  # noqa: B018  (starts the instance)
            # connecting, the schema history's bootstrap: once per process, not per row
            store = source._instance.store
            while store.stats().put_seq < 0:
                time.sleep(0.001)
            c1, w1 = cpu_seconds(), time.perf_counter()
            stages[0].cpu, stages[0].wall = c1 - c0, w1 - w0
            wait_stored(source, st["rows"], timeout=600)
            stages[1].cpu, stages[1].wall = cpu_seconds() - c1, time.perf_counter() - w1
            taken = window = 0
            while taken < st["rows"]:
                c0, w0 = cpu_seconds(), time.perf_counter()
                with prof.stage(f"get-{window}"):
                    fetched = source.get_window(cfg.window.max_rows, cfg.window.max_bytes, 0.5)
                stages[2].cpu += cpu_seconds() - c0
                stages[2].wall += time.perf_counter() - w0
                if fetched.empty:
                    raise SystemExit(f"the store ran dry after {taken} of {st['rows']} row changes")
                # the last window also takes what other sessions wrote after the workload (transaction entries of
                # filtered tables): left out, so that a replay stages exactly the same window
                entries = [e for e in fetched.entries if in_range(e, st)]
                if digest:
                    for e in entries:
                        entries_digest.update(len(e).to_bytes(4, "little") + e)
                c0, w0 = cpu_seconds(), time.perf_counter()
                with prof.stage(f"staging-{window}"):
                    manifest = stage_window(entries, root=cfg.staging_root, destination=cfg.destination,
                                            window=window, attempt=0, batch_ids=fetched.batch_ids,
                                            timezone=cfg.timezone)
                stages[3].cpu += cpu_seconds() - c0
                stages[3].wall += time.perf_counter() - w0
                if digest:
                    staged.append(staged_digest(window_path(cfg.staging_root, cfg.destination, window, 0)))
                source.ack(fetched.batch_ids)
                taken += manifest.rows
                window += 1
        finally:
            source.close()
        if prof.parser_profile is not None:
            prof.dump(prof.parser_profile, "parse")
    return Result(stages, window, [entries_digest.hexdigest(), *staged] if digest else [])


def report(st: dict[str, Any], window_rows: int, results: list[Result]) -> None:
    """Per stage: CPU seconds and us per row change, the least over the passes (the run least disturbed by
    anything else on the machine) and, with several passes, the median."""
    n = st["rows"]
    print(f"\n{n} row changes ({st['transactions']} transactions), {results[0].windows} windows of <= "
          f"{window_rows} rows, {len(results)} pass(es)")
    print(f"{'stage':<14}{'CPU s':>9}{'wall s':>9}{'us/row':>9}{'median':>9}")
    rows: list[tuple[str, list[tuple[float, float]]]] = [
        (s.name, [(r.stages[i].cpu, r.stages[i].wall) for r in results]) for i, s in enumerate(results[0].stages)]
    # per row: what the code server spends on every row change (startup is once per process)
    rows.append(("total per row", [(sum(s.cpu for s in r.stages[1:]), sum(s.wall for s in r.stages[1:]))
                                   for r in results]))
    for name, runs in rows:
        cpu, wall = min(runs)
        med = statistics.median(c for c, _ in runs)
        print(f"{name:<14}{cpu:>9.2f}{wall:>9.2f}{cpu / n * 1e6:>9.1f}{med / n * 1e6:>9.1f}")
    for r in results:
        if r.digests != results[0].digests:
            raise SystemExit("the passes staged different windows")
    if results[0].digests:
        entries, *windows = results[0].digests
        print(f"\nentries digest: {entries}")
        for i, d in enumerate(windows):
            print(f"window {i} digest: {d}")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rows", type=int, default=200_000, help="row changes to write")
    ap.add_argument("--tx-rows", type=int, default=2000, help="row changes per transaction")
    ap.add_argument("--preload", type=int, default=100_000, help="rows in the table before the changes")
    ap.add_argument("--window-rows", type=int, default=100_000, help="window.max_rows")
    ap.add_argument("--reuse", action="store_true", help="replay the last workload's binlog range")
    ap.add_argument("--digest", action="store_true", help="print digests of the entries and the staged files")
    ap.add_argument("--profile", type=Path, help="write cProfile stats per stage into this directory")
    ap.add_argument("--repeat", type=int, default=1, help="passes over the workload (least and median CPU)")
    args = ap.parse_args()
    if args.profile and args.repeat != 1:
        ap.error("--profile takes one pass (--repeat 1)")
    use_schema(SCHEMA)
    if args.reuse and STATE.exists():
        st = json.loads(STATE.read_text())
    else:
        t0 = time.perf_counter()
        st = build_workload(args.rows, args.tx_rows, args.preload)
        print(f"workload: {st['rows']} row changes written in {time.perf_counter() - t0:.1f} s, binlog "
              f"{st['start_file']}:{st['start_pos']} .. {st['end_file']}:{st['end_pos']}")
    # the harness's own threads (none besides the parser) would blur the split: say so if there are any
    extra = [t.name for t in threading.enumerate() if t is not threading.main_thread()]
    if extra:
        print(f"note: other threads running: {extra}")
    report(st, args.window_rows, [run(st, args.window_rows, args.digest, args.profile) for _ in range(args.repeat)])


if __name__ == "__main__":
    main()
