"""The chaos suite: the real main job (pipelines/cli/main.py) under faults, checked for lost, doubled and corrupted
rows.

    scripts/chaos.sh [--minutes N] [--faults K] [--seed S] ...      (python -m tests.chaos --help)

One run, everything under ``--dir`` (default ``.runtime/chaos``):

1. ``environment``: a MariaDB instance of its own (``scripts/mariadb.sh``, instance ``--instance``, its own port),
   the workload's schema with some rows, a Canal destination, pipeline.yaml and DAGSTER_HOME of its own.
2. ``mainjob``: ``python -m pipelines.cli.main --no-demo`` on that configuration: the supervised code server,
   webserver and daemon, its Spark Connect server and the run workers, found by walking /proc from its pid
   (``--spark per-run``: the workers' own Spark JVMs instead of the server).
3. ``workload``: transactions of every kind on the source, each logged with its outcome.
4. ``faults``: seeded kinds at seeded times, each only once its target exists: SIGKILL of a process of the main
   job's tree, of the whole tree (then the main job is started again, as a service manager would), or a restart
   of the source.
5. After the last fault the workload stops; the suite waits (bounded) for the pipeline to catch up by itself and
   ``verify`` checks the mirrors against the source, the changelog against an independent reading of the binlog
   (python-mysql-replication) and the workload's log, and that the sensor never stopped.
6. ``report``: the figures, and the exit code (0 only when every check holds).
"""
