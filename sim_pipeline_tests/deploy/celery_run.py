"""Run jobs of the Celery test's code location through the Celery executor, from a process of their own (the runs'
orchestrator), on the instance in $DAGSTER_HOME:

    python -m sim_pipeline_tests.deploy.celery_run JOB[:PARTITION] ...
    python -m sim_pipeline_tests.deploy.celery_run --from-failure RUN_ID JOB

The second form re-executes a failed run from its failed steps (what the UI's "Re-execute from failure" does).
One JSON line per run (job, partition, run_id, success, orchestrator pid); stops at the first failed run. The test
runs this in a subprocess so that a run stuck waiting for a worker ends with the subprocess's timeout.
"""

from __future__ import annotations

import json
import os
import sys

import dagster as dg
from dagster._core.definitions.reconstruct import ReconstructableRepository

from sim_pipeline.defs.partitions import seed_by_version
from sim_pipeline_tests.deploy.locations import DOMAIN
from sim_pipeline_tests.deploy.services import REPO

LOCATION_MODULE = "sim_pipeline_tests.deploy.celery_location"


def partition_tags(partition: str | None) -> dict[str, str]:
    """The run tags Dagster gives a run of that partition ('<version>|<seed>', a seed, or none)."""
    if not partition:
        return {}
    if "|" in partition:
        return dict(seed_by_version(DOMAIN).get_tags_for_partition_key(partition))
    return {"dagster/partition": partition}


def main(argv: list[str]) -> int:
    """Execute each JOB[:PARTITION] in order; exit status 1 at the first failed run."""
    repository = ReconstructableRepository.for_module(LOCATION_MODULE, "defs", working_directory=str(REPO))
    with dg.DagsterInstance.get() as instance:
        if argv[0] == "--from-failure":
            _, parent, job = argv
            # The partition tags are the parent's, as the UI's re-execution keeps them (execute_job does not).
            tags = {key: value for key, value in instance.get_run_by_id(parent).tags.items()
                    if key.startswith("dagster/partition")}
            result = dg.execute_job(repository.get_reconstructable_job(job), instance, tags=tags,
                                    reexecution_options=dg.ReexecutionOptions.from_failure(parent, instance))
            print(json.dumps({"job": job, "parent": parent, "run_id": result.run_id, "success": result.success,
                              "pid": os.getpid()}), flush=True)
            return 0 if result.success else 1
        for item in argv:
            job, _, partition = item.partition(":")
            result = dg.execute_job(repository.get_reconstructable_job(job), instance,
                                    tags=partition_tags(partition or None))
            print(json.dumps({"job": job, "partition": partition, "run_id": result.run_id,
                              "success": result.success, "pid": os.getpid()}), flush=True)
            if not result.success:
                return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
