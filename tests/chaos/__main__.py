"""python -m tests.chaos [--minutes N] [--faults K] [--seed S] ... (scripts/chaos.sh sets up the machine first).

Runs the main job under a logged workload and faults, waits for it to converge by itself, verifies, prints the
report (also written to DIR/report.txt and DIR/report.json) and exits 0 only when every check holds."""

from __future__ import annotations

import argparse
import datetime as dt
import os
import shlex
import signal
import sys
import time
from pathlib import Path

from .environment import ChaosSetupError
from .faults import KINDS, Kind
from .suite import Options, run


def main(argv: list[str] | None = None) -> int:
    defaults = Options()
    ap = argparse.ArgumentParser(prog="python -m tests.chaos", description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--minutes", type=float, default=defaults.minutes, help="how long the workload runs")
    ap.add_argument("--faults", type=int, default=defaults.faults,
                    help="how many faults (every kind once when at least as many as kinds, then at random)")
    ap.add_argument("--seed", type=int, default=defaults.seed, help="chooses the faults, their times and targets, "
                    "and the workload's transactions (default: from the clock, printed)")
    ap.add_argument("--rate", type=float, default=defaults.rate, help="workload transactions per second")
    ap.add_argument("--kinds", default=",".join(KINDS), help="fault kinds, comma-separated (default: all)")
    ap.add_argument("--converge-seconds", type=float, default=defaults.converge_seconds,
                    help="bound on the time from the last fault until every check holds")
    ap.add_argument("--dir", type=Path, default=defaults.root, help="the run's directory (emptied first)")
    ap.add_argument("--instance", default=defaults.instance, help="the scripts/mariadb.sh instance the run creates")
    ap.add_argument("--mariadb-port", type=int, default=int(os.environ.get("CANAL_CHAOS_MARIADB_PORT") or 0),
                    help="its port (default $CANAL_CHAOS_MARIADB_PORT, else a free one)")
    ap.add_argument("--ui-port", type=int, default=0, help="the Dagster UI's port (default: a free one)")
    ap.add_argument("--spark", choices=("server", "per-run"), default=defaults.spark,
                    help="the main job's Spark: its supervised Connect server (default) or a JVM per run")
    args = ap.parse_args(argv)
    try:
        kinds = tuple(Kind(k.strip()) for k in args.kinds.split(",") if k.strip())
    except ValueError as e:
        ap.error(f"--kinds: {e} (known: {', '.join(KINDS)})")
    if args.faults < 0 or args.minutes <= 0 or args.rate <= 0:
        ap.error("--faults must be >= 0, --minutes and --rate > 0")
    opts = Options(minutes=args.minutes, faults=args.faults, seed=args.seed, rate=args.rate, root=args.dir.resolve(),
                   instance=args.instance, mariadb_port=args.mariadb_port, ui_port=args.ui_port,
                   converge_seconds=args.converge_seconds, kinds=kinds, spark=args.spark,
                   command=" ".join(["scripts/chaos.sh", *map(shlex.quote, sys.argv[1:] if argv is None else argv)]))
    t0 = time.monotonic()

    def say(msg: str) -> None:
        line = f"[chaos {dt.datetime.now(dt.UTC):%H:%M:%S} +{time.monotonic() - t0:5.0f}s] {msg}"
        print(line, flush=True)

    def interrupted(signum: int, frame: object) -> None:
        raise KeyboardInterrupt(signal.Signals(signum).name)

    # SIGTERM and SIGINT (also when started in the background, where SIGINT is ignored) unwind the run, so it
    # stops the main job and the source it started
    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, interrupted)
    say(f"seed {opts.seed}")
    try:
        report = run(opts, say)
    except ChaosSetupError as e:
        say(f"cannot run: {e}")
        return 2
    except KeyboardInterrupt as e:
        say(f"interrupted ({e}): stopped what the run started")
        return 130
    print("\n" + report.text(), flush=True)
    return 0 if report.passed else 1


if __name__ == "__main__":
    sys.exit(main())
