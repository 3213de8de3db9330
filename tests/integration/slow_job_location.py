"""A code location with one job whose only op waits (up to 10 minutes), for tests that need a run in flight in a
real run worker process (``dagster api grpc -m tests.integration.slow_job_location``)."""

import time

from dagster import Definitions, OpExecutionContext, job, op


@op
def wait_a_while(context: OpExecutionContext) -> None:
    context.log.info("waiting")
    deadline = time.monotonic() + 600
    while time.monotonic() < deadline:
        time.sleep(0.5)


@job
def slow_job() -> None:
    wait_a_while()


defs = Definitions(jobs=[slow_job])
