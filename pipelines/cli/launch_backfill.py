"""Backfill by time from the shell: runs the ``canal_backfill`` job in this process against the project's
Dagster instance (the run shows up in the UI like one launched from the Launchpad).

    python -m pipelines.cli.launch_backfill --start 2026-01-31T10:00 [--end 2026-01-31T11:00] [--table shop.orders ...]

Times are ISO 8601, UTC unless they carry an offset; no --end means up to now; no --table means every
mirrored table. DAGSTER_HOME defaults to the project's dagster_home/ (whose relative storage paths are
taken from the repository root, so this changes into it). The live Canal cursor is never touched. Like every
writer of the destination, the run's step waits for the slot of the Dagster pool canal/<destination> (while a
window run's step holds it, the run's log says "Step blocked by limit for pool").
"""

import argparse
import os
import sys

from ..engine.config import REPO_ROOT


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m pipelines.cli.launch_backfill", description=__doc__.split("\n\n")[0])
    ap.add_argument("--start", required=True, help="period start (ISO 8601, UTC unless an offset is given)")
    ap.add_argument("--end", default="", help="period end, exclusive (default: now)")
    ap.add_argument("--table", action="append", default=[], metavar="SCHEMA.TABLE",
                    help="a table to backfill (repeatable; default: every mirrored table)")
    ap.add_argument("--destination", default="",
                    help="the destination to backfill, when conf/pipeline.yaml lists several (destinations:)")
    args = ap.parse_args(argv)

    from ..defs.assets.backfill import parse_time

    try:  # fail on a bad time before loading anything
        start = parse_time(args.start, "--start")
        if args.end and parse_time(args.end, "--end") <= start:
            ap.error(f"--end {args.end} is not after --start {args.start}")
    except ValueError as e:
        ap.error(str(e))

    os.environ.setdefault("DAGSTER_HOME", str(REPO_ROOT / "dagster_home"))
    os.chdir(REPO_ROOT)
    from dagster import DagsterInstance

    from ..defs.assets.keys import keys_for
    from ..defs.definitions import config, defs

    chosen = [c for c in config.per_destination() if args.destination in ("", c.destination)]
    if not chosen or (len(chosen) > 1 and not args.destination):
        ap.error(f"--destination: one of {', '.join(c.destination for c in config.per_destination())}")
    keys = keys_for(chosen[0])
    job = defs.resolve_job_def(keys.backfill_job)
    run_config = {"ops": {keys.backfill_op: {"config": {
        "start_time": args.start, "end_time": args.end, "tables": args.table}}}}
    with DagsterInstance.get() as instance:
        result = job.execute_in_process(run_config=run_config, instance=instance, raise_on_error=False,
                                        tags={"canal/kind": "backfill", "canal/start_time": args.start,
                                              "canal/end_time": args.end or "now"})
    status = "succeeded" if result.success else "FAILED"
    print(f"backfill run {result.run_id} {status} (see it in the Dagster UI)")
    if not result.success:
        for ev in result.all_events:
            if ev.is_failure and ev.step_failure_data and ev.step_failure_data.error:
                print(f"  {ev.step_key}: {ev.step_failure_data.error.message.strip()}", file=sys.stderr)
    return 0 if result.success else 1


if __name__ == "__main__":
    sys.exit(main())
